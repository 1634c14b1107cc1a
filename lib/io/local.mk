## lib/io: the async-I/O engine, datasets, checkpoints and model-weight
## formats; one fragment each.
include $(srcdir)/lib/io/aio.mk
include $(srcdir)/lib/io/data.mk
include $(srcdir)/lib/io/ckpt.mk
include $(srcdir)/lib/io/weights.mk
