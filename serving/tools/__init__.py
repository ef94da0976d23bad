"""Command-line tools around an export or a server; each is `python -m serving.tools.<name>`:

client          one request over REST or gRPC
demo            train-free preflight, then serve and ask (`make run`)
attention_maps  pictures of a model's attention, from an export or a server
predict         a whole file through an export (batch_files reads/writes, batch_model runs)
beam_predict    the same job as an Apache Beam pipeline
"""
