#!/bin/bash
# GPT-3 175B with Megatron-LM on 128 nodes of 8 GPUs: tensor parallelism 8
# inside a node, 16 pipeline stages of two interleaved chunks (3 layers
# each), data parallelism 8 with the distributed optimizer and both overlaps,
# a global batch of 1536 sequences. An example of the flags shardsim reads
# (Megatron-LM's arguments.py), not a published configuration.
#
#   shardsim run --model gpt3-175b --megatron workloads/megatron/gpt3-175b-1024gpu.sh
export CUDA_DEVICE_MAX_CONNECTIONS=1
GPUS_PER_NODE=8

GPT_MODEL_ARGS=(
    --num-layers 96
    --hidden-size 12288
    --num-attention-heads 96
    --seq-length 2048
    --max-position-embeddings 2048
)
TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 1536
    --lr 6.0e-5
    --bf16
    --use-flash-attn
)
MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size 8
    --pipeline-model-parallel-size 16
    --num-layers-per-virtual-pipeline-stage 3
    --sequence-parallel
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
)
torchrun --nproc_per_node $GPUS_PER_NODE --nnodes 128 pretrain_gpt.py \
    ${GPT_MODEL_ARGS[@]} ${TRAINING_ARGS[@]} ${MODEL_PARALLEL_ARGS[@]} \
    --data-path $DATA_PATH
