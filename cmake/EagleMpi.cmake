# MPI for the multi-worker strategy (src/dist/mpi.c). AUTO builds it in when CMake's FindMPI finds
# a C MPI (Debian: libopenmpi-dev, which scripts/install-deps.sh installs); without it the rest
# builds and eg_strategy_multi_worker_new says what to install.
set(EAGLE_MPI AUTO CACHE STRING "Multi-worker training over MPI: ON, OFF or AUTO (ON when found)")
set_property(CACHE EAGLE_MPI PROPERTY STRINGS ON OFF AUTO)

set(EG_HAVE_MPI OFF)
set(EG_MPI_LINK "")
set(EG_MPI_INFO "off")
if(NOT EAGLE_MPI STREQUAL "OFF")
  if(EAGLE_MPI STREQUAL "ON")
    find_package(MPI REQUIRED COMPONENTS C)
  else()
    find_package(MPI QUIET COMPONENTS C)
  endif()
  if(MPI_C_FOUND)
    set(EG_HAVE_MPI ON)
    set(EG_MPI_LINK MPI::MPI_C)
    set(EG_MPI_INFO "${MPI_C_VERSION}")
    message(STATUS "Eagle: multi-worker training over MPI ${MPI_C_VERSION} (${MPIEXEC_EXECUTABLE})")
  else()
    set(EG_MPI_INFO "not found")
    message(STATUS "Eagle: no MPI found; multi-worker training is not built")
  endif()
endif()

# The library's objects: MPI's headers and EG_HAVE_MPI for src/dist/mpi.c.
function(eg_mpi_configure_objects target)
  if(EG_HAVE_MPI)
    target_compile_definitions(${target} PRIVATE EG_HAVE_MPI=1)
    target_link_libraries(${target} PRIVATE MPI::MPI_C)
  endif()
endfunction()
