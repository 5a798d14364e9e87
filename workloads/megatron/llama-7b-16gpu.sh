#!/bin/bash
# LLaMA-7B (the llama-7b preset) with Megatron-LM on 2 nodes of 8
# GPUs: tensor parallelism 4 with sequence parallelism, 2 pipeline stages,
# data parallelism 2, the distributed optimizer, selective recompute.
#
#   shardsim run --cluster dgx-a100-2node --model llama-7b --megatron workloads/megatron/llama-7b-16gpu.sh
torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py \
    --num-layers 32 --hidden-size 4096 --ffn-hidden-size 11008 --num-attention-heads 32 \
    --swiglu --normalization RMSNorm --position-embedding-type rope --disable-bias-linear \
    --untie-embeddings-and-output-weights --attention-dropout 0.0 --hidden-dropout 0.0 \
    --seq-length 4096 --max-position-embeddings 4096 \
    --micro-batch-size 1 --global-batch-size 64 --bf16 \
    --tensor-model-parallel-size 4 --sequence-parallel --pipeline-model-parallel-size 2 \
    --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather \
    --recompute-activations
