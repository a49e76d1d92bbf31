# Each served model carries tritonhf/runtime/ as tritonhf_runtime/ (copied beside model.py):
# for mypy over the templates, the copy is the package's module.
from tritonhf.runtime import *  # noqa: F403
