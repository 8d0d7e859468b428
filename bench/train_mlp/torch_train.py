"""PyTorch eager doing what `eagle train` does: the same MLP (glorot-uniform kernels, zero biases),
Adam with Keras' defaults, the same batches in the same order; prints eagle train's lines."""
import torch
import torch.nn.functional as F

import fashion


def main():
    args = fashion.parse_args(__doc__)
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(args.seed)
    train_x, train_y = fashion.load(True, args.limit)
    test_x, test_y = fashion.load(False)
    train_x, train_y = torch.from_numpy(train_x), torch.from_numpy(train_y)
    test_x, test_y = torch.from_numpy(test_x), torch.from_numpy(test_y)

    layers, units = [], 784
    for h in args.hidden:
        layers += [torch.nn.Linear(units, h), torch.nn.ReLU()]
        units = h
    layers.append(torch.nn.Linear(units, 10))
    model = torch.nn.Sequential(*layers)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            torch.nn.init.xavier_uniform_(layer.weight)
            torch.nn.init.zeros_(layer.bias)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-7)
    autocast, scaler = fashion.torch_autocast(args.precision)

    def batch(images, labels, idx):
        return images[idx].float().mul_(1.0 / 255.0), labels[idx]

    def step(indices):
        x, y = batch(train_x, train_y, torch.from_numpy(indices))
        with autocast():
            logits = model(x)
            loss = F.cross_entropy(logits, y)
        optimizer.zero_grad(set_to_none=True)
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        return loss.item(), (logits.detach().argmax(1) == y).sum().item()

    def evaluate():
        hits = loss = 0.0
        with torch.no_grad():
            for s in range(0, len(test_y), 1000):
                x, y = test_x[s:s + 1000].float().mul_(1.0 / 255.0), test_y[s:s + 1000]
                with autocast():
                    logits = model(x).float()
                loss += F.cross_entropy(logits, y, reduction="sum").item()
                hits += (logits.argmax(1) == y).sum().item()
        return hits / len(test_y), loss / len(test_y)

    fashion.train(args, f"torch {torch.__version__}", step, evaluate, len(train_y))


if __name__ == "__main__":
    main()
