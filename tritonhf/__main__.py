"""``python -m tritonhf`` runs the CLI."""

from tritonhf.cli.main import main

main()
