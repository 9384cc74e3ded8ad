"""Offline training: dataset builders, trainers, adapter registry, deploy, retrain loop."""
