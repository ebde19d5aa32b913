# How the tests start ranks, chosen per MPI flavour: one implementation's launcher
# options and environment are unknown (or errors) to another's. Sets
#   TRIDENT_MPIEXEC        the launcher and its options, before `-n N PROGRAM`
#   TRIDENT_MPIEXEC_LINE   the same as one string, for the shell scripts in cli/
#   TRIDENT_TEST_ENV       the environment of every test
# TRIDENT_MPIEXEC_FLAGS (cache) holds the flavour's options; MPIEXEC_PREFLAGS adds a site's.
execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version
                OUTPUT_VARIABLE _mpi_version ERROR_VARIABLE _mpi_version)
set(TRIDENT_TEST_ENV OMP_NUM_THREADS=1)
if(_mpi_version MATCHES "Open MPI|OpenRTE")
  set(TRIDENT_MPI_FLAVOUR "Open MPI")
  # mpirun refuses more ranks than cores, and root (CI), unless told; CMA
  # single-copy needs ptrace rights that containers lack.
  set(_flavour_flags "--oversubscribe")
  list(APPEND TRIDENT_TEST_ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
       OMPI_MCA_btl_vader_single_copy_mechanism=none)
elseif(_mpi_version MATCHES "HYDRA|MPICH")
  set(TRIDENT_MPI_FLAVOUR "MPICH")
  set(_flavour_flags "")  # Hydra runs more ranks than cores, and as root, as it is
else()
  set(TRIDENT_MPI_FLAVOUR "unknown")
  set(_flavour_flags "")
endif()
set(TRIDENT_MPIEXEC_FLAGS "${_flavour_flags}" CACHE STRING
    "Launcher options for the tests (default: what the MPI flavour needs)")
separate_arguments(_flags UNIX_COMMAND "${TRIDENT_MPIEXEC_FLAGS} ${MPIEXEC_PREFLAGS}")
set(TRIDENT_MPIEXEC ${MPIEXEC_EXECUTABLE} ${_flags})
list(JOIN TRIDENT_MPIEXEC " " TRIDENT_MPIEXEC_LINE)
message(STATUS "Tests launch ranks with: ${TRIDENT_MPIEXEC_LINE} (${TRIDENT_MPI_FLAVOUR})")
