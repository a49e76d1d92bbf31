"""The ``tritonhf`` command line (typer)."""
