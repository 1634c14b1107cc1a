## lib/optim: (no sources yet)
