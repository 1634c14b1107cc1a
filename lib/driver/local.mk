## lib/driver: the top layer of libds, one ds_<tool>_run per tool, wiring
## config, engine, io, monitor and tune together; one fragment per tool
## with its sources, its tool, man page and tests.
noinst_LIBRARIES += lib/driver/libds_driver.a
lib_driver_libds_driver_a_SOURCES =
LIBDS += lib/driver/libds_driver.a
include $(srcdir)/lib/driver/train.mk
include $(srcdir)/lib/driver/nvme_tune.mk
include $(srcdir)/lib/driver/autotune.mk
include $(srcdir)/lib/driver/profile.mk
include $(srcdir)/lib/driver/convert.mk
include $(srcdir)/lib/driver/report.mk
