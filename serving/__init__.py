"""Three products, one package each; arrows point down (tools -> export, server -> tf_serving):

serving/export/      a trained run -> a SavedModel version (the only part importing tfattn)
serving/server/      a stand-in for `tensorflow_model_server` (imports neither tfattn nor train)
serving/tools/       client, demo, attention maps, whole-file prediction
serving/tf_serving/  TF Serving's rules both sides follow: versions, warm-up records, XLA switch
"""
