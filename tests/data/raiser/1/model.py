"""A model whose execute raises: the sdk must report it as an InferenceError."""


class TritonPythonModel:
    def execute(self, requests):
        raise RuntimeError("raiser always fails")
