"""A stand-in for TF Serving's `tensorflow_model_server` (`python -m serving.server`, the
program in __main__.py): REST and gRPC over the SavedModels under a model base path. It serves
any SavedModel and imports neither `tfattn` nor `train`."""
