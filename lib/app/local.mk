## lib/app: facts about this build and this machine that the tools and
## drivers show: the optional-feature table (app), machine facts (sysinfo),
## the GPU and MPI probes (real or stub).
noinst_LIBRARIES += lib/app/libds_app.a
lib_app_libds_app_a_SOURCES = \
	lib/app/app.c lib/app/app.h \
	lib/app/sysinfo.c lib/app/sysinfo.h \
	lib/app/blas_core.c lib/app/blas_core.h \
	lib/app/gpu.h lib/app/mpiver.h
if HAVE_CUDA
lib_app_libds_app_a_SOURCES += lib/app/gpu_cuda.c lib/app/gpu_count_cuda.c
else
lib_app_libds_app_a_SOURCES += lib/app/gpu_stub.c
endif
if HAVE_MPI
lib_app_libds_app_a_SOURCES += lib/app/mpiver_mpi.c
else
lib_app_libds_app_a_SOURCES += lib/app/mpiver_stub.c
endif
LIBDS += lib/app/libds_app.a
EXTRA_DIST += lib/app/gpu_cuda.c lib/app/gpu_count_cuda.c lib/app/gpu_stub.c lib/app/mpiver_mpi.c lib/app/mpiver_stub.c
