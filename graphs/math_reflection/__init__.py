"""math-reflection: an actor answers, a ground-truth judge scores it, a critic reviews it, and
the actor refines its answer from the critique."""
