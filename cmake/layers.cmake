# The layers of the core (docs/architecture.md), enforced by the build.
#
# gpustripe_add_layer(<name>) adds the next layer up (layers are added lowest first) as two
# targets:
#   gpustripe_headers_<name>  INTERFACE: an include root that holds src/<name>/ and nothing
#                             else, linked to the headers of the layer below, so it carries the
#                             roots of every layer up to <name>;
#   gpustripe_layer_<name>    OBJECT: the layer's sources (target_sources in src/<name>/),
#                             compiled against gpustripe_headers_<name>.
# A source that includes a header of a layer above its own finds no such file and does not
# compile. scripts/check-layers.py checks the same order over the text (and keeps the
# backend's cuda/ and emulated/ folders private, which an include root cannot).
#
# gpustripe_add_layer_link_checks() links, for each layer but the top one, a shared library of
# that layer's objects and those below it with --no-undefined: a call that climbs (a function
# of a layer above declared by hand, say) fails to link. libgpustripe.so itself, all layers,
# links with --no-undefined too.
#
# gpustripe_link_layers(<target>) links every layer's objects into <target> (libgpustripe.so)
# and hands its users the headers of all layers.

set_property(GLOBAL PROPERTY GPUSTRIPE_LAYERS "")

function(gpustripe_add_layer name)
  get_property(layers GLOBAL PROPERTY GPUSTRIPE_LAYERS)
  # The include root: <build>/layers/<name>/<name> -> src/<name>, so "<name>/x.hpp" resolves
  # through this root only.
  set(root ${PROJECT_BINARY_DIR}/layers/${name})
  set(link ${root}/${name})
  set(current "")
  if(IS_SYMLINK ${link})
    file(READ_SYMLINK ${link} current)
  endif()
  if(NOT current STREQUAL "${PROJECT_SOURCE_DIR}/src/${name}")
    file(MAKE_DIRECTORY ${root})
    file(REMOVE ${link})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/${name} ${link} SYMBOLIC)
  endif()

  add_library(gpustripe_headers_${name} INTERFACE)
  target_include_directories(gpustripe_headers_${name} INTERFACE $<BUILD_INTERFACE:${root}>)
  if(layers)
    list(GET layers -1 below)
    target_link_libraries(gpustripe_headers_${name} INTERFACE gpustripe_headers_${below})
  else()
    # The lowest layer carries what all of them use: the public C header (include/gpustripe),
    # threads, JSON, dlopen, and the CUDA runtime where it is built with CUDA.
    target_include_directories(gpustripe_headers_${name} INTERFACE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>)
    target_link_libraries(gpustripe_headers_${name} INTERFACE Threads::Threads nlohmann_json::nlohmann_json
                          ${CMAKE_DL_LIBS})
    target_compile_definitions(gpustripe_headers_${name} INTERFACE
                               $<$<BOOL:${GPUSTRIPE_HAVE_CUDA}>:GPUSTRIPE_HAVE_CUDA=1>)
    if(GPUSTRIPE_HAVE_CUDA)
      target_link_libraries(gpustripe_headers_${name} INTERFACE CUDA::cudart)
    endif()
  endif()

  add_library(gpustripe_layer_${name} OBJECT)
  target_link_libraries(gpustripe_layer_${name} PUBLIC gpustripe_headers_${name})
  target_compile_options(gpustripe_layer_${name} PRIVATE
                         $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
  set_property(GLOBAL APPEND PROPERTY GPUSTRIPE_LAYERS ${name})
endfunction()

function(gpustripe_link_layers target)
  get_property(layers GLOBAL PROPERTY GPUSTRIPE_LAYERS)
  foreach(layer IN LISTS layers)
    target_link_libraries(${target} PRIVATE gpustripe_layer_${layer})
  endforeach()
  list(GET layers -1 top)
  target_link_libraries(${target} PUBLIC gpustripe_headers_${top})
  target_link_options(${target} PRIVATE LINKER:--no-undefined)
endfunction()

function(gpustripe_add_layer_link_checks)
  get_property(layers GLOBAL PROPERTY GPUSTRIPE_LAYERS)
  list(POP_BACK layers)  # the top layer's check is libgpustripe.so itself
  set(objects "")
  foreach(layer IN LISTS layers)
    list(APPEND objects $<TARGET_OBJECTS:gpustripe_layer_${layer}>)
    add_library(gpustripe_linkcheck_${layer} SHARED ${objects})
    target_link_libraries(gpustripe_linkcheck_${layer} PRIVATE gpustripe_headers_${layer})
    # Debug sections are left out: the check is about symbols, and they make the link slow.
    target_link_options(gpustripe_linkcheck_${layer} PRIVATE LINKER:--no-undefined LINKER:--strip-debug)
    set_target_properties(gpustripe_linkcheck_${layer} PROPERTIES
                          LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/layers/linkcheck)
  endforeach()
endfunction()
