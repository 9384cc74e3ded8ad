"""negotiation: a proposer and a counterpart bargain over a pool of items with private values;
a judge scores the deal's fairness and each side's coherence."""
