## lib/monitor: stdout log, CSV, TensorBoard, and flops-profile formatting.
include $(srcdir)/lib/monitor/log.mk
include $(srcdir)/lib/monitor/profile.mk
