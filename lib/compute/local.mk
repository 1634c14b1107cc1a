## lib/compute: the compute backend table the model calls for every tensor
## operation (cpu: kernels/cpu; cuda: not yet), --device's selection and the
## device a rank uses.
noinst_LIBRARIES += lib/compute/libds_compute.a
lib_compute_libds_compute_a_SOURCES = lib/compute/compute.c lib/compute/compute.h \
	lib/compute/compute_cpu.c
LIBDS += lib/compute/libds_compute.a

