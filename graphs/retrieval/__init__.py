"""retrieval: a researcher answers questions by searching a local corpus (SQLite FTS5, bm25)
and citing the documents it used; a planter plants near-miss distractors into its search
results; a judge checks the answer and the citations against gold answers and documents."""
