"""The networks of the paper's end-to-end benchmark (section 7.3), channel-last, with random
weights from a seed: ResNet-50, MobileNet-V2, 3D-ResNet-18, the DCGAN generator and
BERT-base. Each takes the batch size and smaller-than-real sizes (image size, layers...) so
that tests can build and run small versions of the same architectures.

Architectures: ResNet-50 v1.5 (stride in the 3×3 conv of a bottleneck); MobileNet-V2
(width 1.0, ReLU6); 3D-ResNet-18 after TVM's ``relay.testing.resnet_3d`` (input 16×112×112,
stem kernel 3×7×7 stride 1×2×2, basic blocks); the DCGAN generator of the paper's T2D
layers (z of 100 → 4×4×512 → 64×64×3); BERT-base encoder (hidden 768, 12 layers, 12 heads,
FFN 3072) from embedded inputs (token + segment embeddings; position embeddings are added).
"""
from __future__ import annotations

import math

from .graph import Graph, GraphBuilder, Node

#: the last batch norm of each residual branch starts small (as "zero-init residual"), so
#: that activations stay of moderate size through a deep network of random weights
_RESIDUAL_GAMMA = (0.2, 0.4)


def _conv_bn(b: GraphBuilder, x: Node, channels: int, kernel, stride=1, padding=0, act: str | None = "relu",
             gamma=(0.8, 1.2), groups: int = 1) -> Node:
    y = b.batch_norm(b.conv(x, channels, kernel, stride, padding, groups=groups), gamma=gamma)
    if act == "relu":
        return b.relu(y)
    if act == "relu6":
        return b.relu6(y)
    return y


def _classifier(b: GraphBuilder, x: Node, num_classes: int) -> Node:
    y = b.global_avg_pool(x)
    y = b.reshape(y, (x.shape[0], x.shape[-1]))
    return b.dense(y, num_classes, std=0.01)


def _bottleneck(b, x, channels, stride, downsample):
    out = channels * 4
    h = _conv_bn(b, x, channels, 1)
    h = _conv_bn(b, h, channels, 3, stride, 1)
    h = _conv_bn(b, h, out, 1, act=None, gamma=_RESIDUAL_GAMMA)
    shortcut = _conv_bn(b, x, out, 1, stride, act=None) if downsample else x
    return b.relu(b.add(h, shortcut))


def _basic_block(b, x, channels, stride, downsample):
    h = _conv_bn(b, x, channels, 3, stride, 1)
    h = _conv_bn(b, h, channels, 3, 1, 1, act=None, gamma=_RESIDUAL_GAMMA)
    shortcut = _conv_bn(b, x, channels, 1, stride, act=None) if downsample else x
    return b.relu(b.add(h, shortcut))


def _resnet_stages(b, y, blocks, bottleneck: bool, widths=(64, 128, 256, 512)) -> Node:
    expansion = 4 if bottleneck else 1
    for stage, (n, c) in enumerate(zip(blocks, widths)):
        for k in range(n):
            stride = 2 if (k == 0 and stage > 0) else 1
            downsample = k == 0 and (stride != 1 or y.shape[-1] != c * expansion)
            block = _bottleneck if bottleneck else _basic_block
            y = block(b, y, c, stride, downsample)
    return y


def resnet50(batch: int = 1, image_size: int = 224, num_classes: int = 1000, seed: int = 0,
             blocks=(3, 4, 6, 3)) -> Graph:
    """ResNet-50 v1.5, NHWC input (batch, image_size, image_size, 3)."""
    b = GraphBuilder("resnet50", seed)
    x = b.input((batch, image_size, image_size, 3))
    y = _conv_bn(b, x, 64, 7, 2, 3)
    y = b.max_pool(y, 3, 2, 1)
    y = _resnet_stages(b, y, blocks, bottleneck=True)
    return b.graph([_classifier(b, y, num_classes)])


def resnet3d_18(batch: int = 1, frames: int = 16, image_size: int = 112, num_classes: int = 400, seed: int = 0,
                blocks=(2, 2, 2, 2)) -> Graph:
    """3D-ResNet-18, NDHWC input (batch, frames, image_size, image_size, 3)."""
    b = GraphBuilder("resnet3d_18", seed)
    x = b.input((batch, frames, image_size, image_size, 3))
    y = _conv_bn(b, x, 64, (3, 7, 7), (1, 2, 2), (1, 3, 3))
    y = b.max_pool(y, 3, 2, 1)
    y = _resnet_stages(b, y, blocks, bottleneck=False)
    return b.graph([_classifier(b, y, num_classes)])


_MOBILENET_V2 = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                 (6, 320, 1, 1))


def mobilenet_v2(batch: int = 1, image_size: int = 224, num_classes: int = 1000, seed: int = 0,
                 config=_MOBILENET_V2, last_channels: int = 1280) -> Graph:
    """MobileNet-V2 (width 1.0), NHWC input (batch, image_size, image_size, 3).
    ``config``: (expansion t, channels c, repeats n, stride s) per stage."""
    b = GraphBuilder("mobilenet_v2", seed)
    x = b.input((batch, image_size, image_size, 3))
    y = _conv_bn(b, x, 32, 3, 2, 1, act="relu6")
    for t, c, n, s in config:
        for i in range(n):
            stride = s if i == 0 else 1
            cin = y.shape[-1]
            h = _conv_bn(b, y, cin * t, 1, act="relu6") if t != 1 else y
            h = b.relu6(b.batch_norm(b.depthwise_conv2d(h, 3, stride, 1)))
            gamma = _RESIDUAL_GAMMA if stride == 1 and cin == c else (0.8, 1.2)
            h = _conv_bn(b, h, c, 1, act=None, gamma=gamma)
            y = b.add(h, y) if stride == 1 and cin == c else h
    y = _conv_bn(b, y, last_channels, 1, act="relu6")
    return b.graph([_classifier(b, y, num_classes)])


def dcgan(batch: int = 1, z_dim: int = 100, base_channels: int = 512, base_size: int = 4, layers: int = 4,
          out_channels: int = 3, seed: int = 0) -> Graph:
    """The DCGAN generator: z (batch, z_dim) → dense → (batch, 4, 4, 512) → batch norm, ReLU →
    transposed convs (kernel 4, stride 2, padding 1) halving the channels → 3 channels, tanh:
    (batch, 64, 64, 3). Its transposed convs are the suite's T2D layers."""
    b = GraphBuilder("dcgan", seed)
    z = b.input((batch, z_dim), name="z")
    y = b.dense(z, base_size * base_size * base_channels, bias=False, std=math.sqrt(1.0 / z_dim))
    y = b.relu(b.batch_norm(b.reshape(y, (batch, base_size, base_size, base_channels))))
    c = base_channels
    for i in range(layers):
        last = i == layers - 1
        c = out_channels if last else c // 2
        y = b.conv2d_transpose(y, c, 4, 2, 1)
        y = b.tanh(y) if last else b.relu(b.batch_norm(y))
    return b.graph([y])


def bert(batch: int = 1, seq_len: int = 128, hidden: int = 768, layers: int = 12, heads: int = 12,
         ffn: int = 3072, seed: int = 0, name: str = "bert_base") -> Graph:
    """A BERT encoder (BERT-base by default) on embedded tokens (batch, seq_len, hidden):
    position embeddings added, layer norm, then ``layers`` × (self-attention with ``heads``
    heads, residual, layer norm, GELU FFN, residual, layer norm)."""
    if hidden % heads:
        raise ValueError(f"bert: hidden {hidden} is not divisible by heads {heads}")
    b = GraphBuilder(name, seed)
    dh = hidden // heads
    std = 0.02
    emb = b.input((batch, seq_len, hidden), name="embeddings")
    pos = b.const((seq_len, hidden), lambda shape: (lambda rng: std * rng.standard_normal(shape)), "position")
    x = b.layer_norm(b.reshape(b.add(emb, pos), (batch * seq_len, hidden)))

    def split_heads(t: Node) -> Node:
        return b.transpose(b.reshape(t, (batch, seq_len, heads, dh)), (0, 2, 1, 3))

    for _ in range(layers):
        q, k, v = (split_heads(b.dense(x, hidden, std=std)) for _ in range(3))
        scores = b.scale(b.batch_matmul(q, k, transpose_b=True), 1.0 / math.sqrt(dh))
        ctx = b.batch_matmul(b.softmax(scores), v)
        ctx = b.reshape(b.transpose(ctx, (0, 2, 1, 3)), (batch * seq_len, hidden))
        x = b.layer_norm(b.add(b.dense(ctx, hidden, std=std), x))
        h = b.gelu(b.dense(x, ffn, std=std))
        x = b.layer_norm(b.add(b.dense(h, hidden, std=std), x))
    return b.graph([b.reshape(x, (batch, seq_len, hidden))])


NETWORKS = {
    "resnet50": resnet50,
    "mobilenet_v2": mobilenet_v2,
    "resnet3d_18": resnet3d_18,
    "dcgan": dcgan,
    "bert": bert,
}
ALIASES = {"resnet-50": "resnet50", "resnet_50": "resnet50", "mobilenet-v2": "mobilenet_v2",
           "mobilenetv2": "mobilenet_v2", "3d-resnet-18": "resnet3d_18", "resnet3d-18": "resnet3d_18",
           "resnet3d": "resnet3d_18", "bert-base": "bert", "bert_base": "bert"}


def network_names() -> list[str]:
    return sorted(NETWORKS)


def get_network(name: str, batch: int = 1, seed: int = 0, **kwargs) -> Graph:
    """A zoo network by name (``network_names()``; "resnet-50", "bert-base"... also work)."""
    key = ALIASES.get(name.lower(), name.lower())
    if key not in NETWORKS:
        raise ValueError(f"unknown network {name!r}; expected one of {', '.join(network_names())}")
    return NETWORKS[key](batch=batch, seed=seed, **kwargs)


__all__ = ["resnet50", "mobilenet_v2", "resnet3d_18", "dcgan", "bert", "NETWORKS", "get_network",
           "network_names"]
