## lib/io: the async-I/O engine, datasets and checkpoints; one fragment each.
include $(srcdir)/lib/io/aio.mk
include $(srcdir)/lib/io/data.mk
include $(srcdir)/lib/io/ckpt.mk
include $(srcdir)/lib/io/convert.mk
