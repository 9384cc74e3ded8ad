"""story: a writer and a co-writer extend a story in turns under constraints (characters, facts
that must stay true, forbidden phrases, a required ending, a length per passage); a judge checks
consistency by rules and compares the writer's two candidate passages for creativity."""
