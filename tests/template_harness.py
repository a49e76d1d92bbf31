"""Templates run in this process (``tritonhf.gallery.inprocess``, which ``gallery add`` checks answers with)."""

from tritonhf.gallery.inprocess import answers, instantiate, load_template_module, triton_args

__all__ = ["answers", "instantiate", "load_template_module", "triton_args"]
