"""discussion: N agents answer a problem, then over rounds each reads the others' previous
answers and answers again; the ground-truth verifier scores every answer."""
