"""Convolutional parts of the pixel and map models: conv-BN-ReLU and ResNet-18's trunk (He et
al.; at width 64 torchvision's layers less the classifier, written here as this floor does not
import torchvision)."""

from __future__ import annotations

from torch import Tensor, nn


def conv_bn(in_channels: int, out_channels: int, kernel_size=3, stride: int = 1,
            padding=0, relu: bool = True) -> nn.Sequential:
    """Conv2d without bias (the batch norm has one), BatchNorm2d, and ReLU if `relu`."""
    layers = [nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                        bias=False), nn.BatchNorm2d(out_channels)]
    return nn.Sequential(*layers, nn.ReLU()) if relu else nn.Sequential(*layers)


class BasicBlock(nn.Module):
    """ResNet's basic block: two 3x3 conv-BN, the identity (or a strided 1x1 conv-BN) added."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1):
        super().__init__()
        self.body = nn.Sequential(
            conv_bn(in_channels, out_channels, 3, stride, 1),
            conv_bn(out_channels, out_channels, 3, 1, 1, relu=False))
        self.shortcut = (nn.Identity() if stride == 1 and in_channels == out_channels
                         else conv_bn(in_channels, out_channels, 1, stride, relu=False))

    def forward(self, x: Tensor) -> Tensor:
        return nn.functional.relu(self.body(x) + self.shortcut(x))


def resnet18(width: int, in_channels: int = 3) -> nn.Sequential:
    """ResNet-18's trunk and global average pooling: [N, in_channels, S, S] -> [N, 8 width]."""
    layers: list[nn.Module] = [conv_bn(in_channels, width, 7, 2, 3),
                               nn.MaxPool2d(3, stride=2, padding=1)]
    channels = width
    for stage in range(4):
        out = width * 2 ** stage
        stride = 1 if stage == 0 else 2
        layers += [BasicBlock(channels, out, stride), BasicBlock(out, out)]
        channels = out
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
