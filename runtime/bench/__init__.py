"""The measurements behind `localllm bench` (runtime/commands/bench.py parses arguments and prints):

machine.py            read bandwidth, the int8 multiply-add peak, peak RSS, best-of timing
matrices.py           the native kernels on a model's real weight matrices, N = 1 .. 512 activation rows
step.py               one decode step of the whole model carrying N sequences, ms per step
model.py              end to end on one model: load, pp (one prompt step), tg (single-token steps)
compare.py            the same on llama.cpp, run by llama-cpp-python's own interpreter: llama_cpp_script.py
                      runs as a script, so no module here may be called llama_cpp (it would shadow the real one)
"""
