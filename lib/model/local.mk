## lib/model: the GPT family (registry, forward/backward) and analytic counts.
include $(srcdir)/lib/model/gpt.mk
include $(srcdir)/lib/model/count.mk
