"""babelspec's drafters inside other engines: Hugging Face transformers (``transformers``)."""
