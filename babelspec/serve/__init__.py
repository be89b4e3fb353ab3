"""An OpenAI-compatible server that drafts per language: ``babelspec serve``.

* ``protocol`` -- request bodies to a :class:`protocol.GenerationRequest` (every bad field a
  400 that names it and says what to send), and responses and stream chunks in OpenAI's shape;
* ``worker`` -- the one model in memory, the bounded queue in front of it, the drafter per
  request (``auto``: the router's route for the request's language) and the engine thread;
* ``app`` -- the HTTP routes (Starlette on uvicorn), server-sent events, ``/metrics``;
* ``bench`` -- ``babelspec bench serve``: latency and tokens/s under concurrent clients.
"""
