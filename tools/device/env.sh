# Sourced on the GPU machine at the start of every run command (see bundle.sh).
export LD_LIBRARY_PATH=$PWD/.devlibs:/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
