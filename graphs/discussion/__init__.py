"""discussion: N agents answer a problem, then over rounds each reads the others' previous
answers and answers again; rules (the ground truth) score every answer."""
