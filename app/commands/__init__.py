"""The CLI commands, one module per family; app.cli assembles them."""
