#!/usr/bin/python3
"""TorchScript models at the sizes users train, for the flags files beside this script and scripts/bench/scale.py.

    /usr/bin/python3 examples/scale/make_models.py OUT_DIR [NAME ...]

writes OUT_DIR/NAME.pt for each model named (all of them by default):
  mlp_37m   784-4096-4096-4096-10 MLP, ReLU: 36,818,954 parameters (the scale issue's "new user" model)
  mlp_110m  784-7168-7168-7168-10 MLP, ReLU: 108,473,354 parameters (BERT-base's count in the cheapest network
            that has it: the parameter server's share of a step at 110 M)
  resnet50  torchvision's ResNet-50 for 10 classes, its first convolution taking Fashion-MNIST's 1 channel:
            23,522,250 parameters (25.6 M with ImageNet's 1000 classes and 3 channels); needs python3-torchvision
Each takes Fashion-MNIST's [n, 1, 28, 28] float images (or anything that flattens to 784 values, for the MLPs) and
returns 10 logits. The weights are PyTorch's default initialization under torch.manual_seed(0): the same file on
every run of this script.
"""
import os
import sys

import torch
import torch.nn as nn


class Mlp(nn.Module):
    def __init__(self, hidden: int, layers: int = 3, classes: int = 10):
        super().__init__()
        sizes = [784] + [hidden] * layers
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))
        self.out = nn.Linear(hidden, classes)

    def forward(self, x):
        x = torch.flatten(x, 1)
        for layer in self.hidden:
            x = torch.relu(layer(x))
        return self.out(x)


def resnet50():
    import torchvision
    m = torchvision.models.resnet50(num_classes=10)
    m.conv1 = nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3, bias=False)
    return m


MODELS = {"mlp_37m": lambda: Mlp(4096), "mlp_110m": lambda: Mlp(7168), "resnet50": resnet50}


def write(name, out_dir):
    """Scripts model `name` and saves it as OUT_DIR/NAME.pt (through a temporary file); returns the path."""
    torch.manual_seed(0)
    module = torch.jit.script(MODELS[name]())
    path = os.path.join(out_dir, f"{name}.pt")
    module.save(path + ".tmp")
    os.replace(path + ".tmp", path)
    return path


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 2
    names = argv[2:] or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        print(f"make_models.py: unknown model {', '.join(unknown)} (have: {', '.join(MODELS)})", file=sys.stderr)
        return 2
    os.makedirs(argv[1], exist_ok=True)
    for name in names:
        path = write(name, argv[1])
        params = sum(p.numel() for p in torch.jit.load(path).parameters())
        print(f"{path}: {params:,} parameters")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
