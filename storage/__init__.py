"""SQL storage: tables, engine, batched recorder, queries and exports."""
