## lib/monitor: stdout log, CSV, TensorBoard, comms tables, metrics JSON.
include $(srcdir)/lib/monitor/log.mk
