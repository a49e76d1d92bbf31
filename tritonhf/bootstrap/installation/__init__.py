"""How a workspace gets its server: where it comes from, installing it, and the stubs' environment.

``sources`` fills an empty folder with a Triton install (the PyTriton wheel by default, a
tarball, a folder); ``install.bootstrap`` lays out the workspace, installs from a source into a
hidden folder, proves the server starts and only then swaps it into place; ``stub_env`` makes
the Python environment the Python backend's stubs run in (numpy < 2 of their own). What the
workspace looks like (``bootstrap.layout``) and how a stub is run in its environment
(``bootstrap.environment``) are shared with the running side and stay beside it; nothing in
the running side imports this package.
"""
