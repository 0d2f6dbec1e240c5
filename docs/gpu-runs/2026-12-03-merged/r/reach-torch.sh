if [ 1 -eq 1 ]; then RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 exec "$@" python3 examples/torch/collectives.py
else exec "$@" python3 -m torch.distributed.run --standalone --nproc-per-node 1 examples/torch/collectives.py; fi
