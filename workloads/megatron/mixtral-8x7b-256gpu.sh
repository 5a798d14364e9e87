#!/bin/bash
# Mixtral-8x7B (the mixtral-8x7b preset) with Megatron-Core on 32 nodes of 8
# GPUs: tensor parallelism 2 with sequence parallelism, 4 pipeline stages,
# the experts over 8 GPUs of each stage (expert tensor parallelism 1, the
# all-to-all token dispatcher), the distributed optimizer with both overlaps.
#
#   shardsim run --cluster h100-1024 --gpus 256 --model mixtral-8x7b --megatron workloads/megatron/mixtral-8x7b-256gpu.sh
torchrun --nproc_per_node 8 --nnodes 32 pretrain_gpt.py \
    --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 \
    --group-query-attention --num-query-groups 8 \
    --swiglu --normalization RMSNorm --position-embedding-type rope --disable-bias-linear \
    --untie-embeddings-and-output-weights --attention-dropout 0.0 --hidden-dropout 0.0 \
    --num-experts 8 --moe-router-topk 2 --moe-grouped-gemm --moe-token-dispatcher-type alltoall \
    --seq-length 4096 --max-position-embeddings 32768 \
    --micro-batch-size 1 --global-batch-size 1024 --bf16 --use-flash-attn \
    --tensor-model-parallel-size 2 --sequence-parallel --pipeline-model-parallel-size 4 \
    --expert-model-parallel-size 8 --expert-tensor-parallel-size 1 \
    --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
