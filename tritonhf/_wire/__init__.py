"""The wire, shared by the SDK, bootstrap, the gateway and the CLI: endpoints and transports over
tritonclient (``transport``, ``aio_transport``), where the default server is (``settings``) and
model configs as clients read them (``config``). Private to tritonhf: the public API is the SDK.
"""
