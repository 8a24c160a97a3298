import mcore_init
from mcore_init import runtime

mcore_init.initialize(tp=2, backend="gloo")            # under mcore-launch, torchrun, srun or mpirun
rank, world = runtime.world()
tp_rank = runtime.group_ranks("tensor_model_parallel").index(rank)
tp_sum = runtime.allreduce_sum("tensor_model_parallel", [rank])[0]
ok = tp_sum == sum(runtime.group_ranks("tensor_model_parallel"))
print(f"rank {rank} of {world}: tp rank {tp_rank}, tp sum {tp_sum} {'ok' if ok else 'WRONG'}")
mcore_init.destroy()
