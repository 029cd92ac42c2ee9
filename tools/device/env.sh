# Sourced on the GPU machine at the start of every run command (see bundle.sh).
export LD_LIBRARY_PATH=$PWD/.devlibs:/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
# PyTorch's cuDNN, for the cuDNN MHA-prefill provider (loaded at run time; absent = our kernel).
if [[ -z ${MLASERVE_CUDNN_LIB:-} ]]; then
  MLASERVE_CUDNN_LIB=$(python3 -c 'import nvidia.cudnn as m, os; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null)
fi
if [[ -n ${MLASERVE_CUDNN_LIB:-} && -e $MLASERVE_CUDNN_LIB/libcudnn.so.9 ]]; then
  export LD_LIBRARY_PATH=$MLASERVE_CUDNN_LIB:$LD_LIBRARY_PATH
fi
export PYTHONUNBUFFERED=1
# ncu is not always on the PATH of the GPU image: the newest Nsight Compute install otherwise
# (NCU_BIN set beforehand wins). Used by kernel_profile.sh, latent_profile.sh, flashmla_baseline.sh.
NCU_BIN=${NCU_BIN:-$(command -v ncu || ls -d /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | sort -V | tail -1)}
export NCU_BIN
