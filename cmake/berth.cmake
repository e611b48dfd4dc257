# Helpers shared by every berth module.

# Warnings for berth's own code (generated protobuf code is exempt).
function(berth_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow
                         -Wnon-virtual-dtor -Wimplicit-fallthrough)
  if(BERTH_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

# berth_use_allocator(target): malloc/free of `target` come from mimalloc
# (BERTH_MIMALLOC). Linked whole and first, so the dynamic linker binds every
# malloc of the process to it, libraries' included.
function(berth_use_allocator target)
  if(BERTH_MIMALLOC)
    # One token: CMake would de-duplicate a separate --pop-state away.
    target_link_libraries(${target} PRIVATE "-Wl,--push-state,--no-as-needed,${BERTH_MIMALLOC_LIBRARY},--pop-state")
  endif()
endfunction()

# berth_library(NAME common SOURCES a.cc b.cc DEPS ...) defines berth_common
# with alias berth::common; include root is src/ so code says "common/x.h".
function(berth_library)
  cmake_parse_arguments(ARG "" "NAME" "SOURCES;DEPS" ${ARGN})
  set(target berth_${ARG_NAME})
  add_library(${target} STATIC ${ARG_SOURCES})
  add_library(berth::${ARG_NAME} ALIAS ${target})
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR}/src
                             ${CMAKE_BINARY_DIR}/generated)
  target_link_libraries(${target} PUBLIC ${ARG_DEPS})
  berth_warnings(${target})
endfunction()

# berth_test(NAME csi_test SOURCES x_test.cc DEPS berth::csi [LABELS unit])
function(berth_test)
  cmake_parse_arguments(ARG "" "NAME" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT BERTH_BUILD_TESTS)
    return()
  endif()
  add_executable(${ARG_NAME} ${ARG_SOURCES})
  # Unity batches (the release preset) are for what scripts/build builds: a
  # test file keeps its fixtures and helpers in an anonymous namespace that
  # would collide with its neighbours', and tests build one file at a time.
  set_target_properties(${ARG_NAME} PROPERTIES UNITY_BUILD OFF)
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS} GTest::gmock GTest::gtest_main)
  berth_warnings(${ARG_NAME})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  gtest_discover_tests(${ARG_NAME} PROPERTIES LABELS "${ARG_LABELS}"
                       DISCOVERY_TIMEOUT 60)
endfunction()

# berth_proto_library(NAME target ROOT dir PROTOS a/b.proto ... [GRPC] [DEPS ...])
# Generates C++ (and gRPC stubs with GRPC) into ${CMAKE_BINARY_DIR}/generated
# from .proto files relative to ROOT; the proto/ directory is always on the
# import path so any proto may import "csi/v1/csi.proto".
function(berth_proto_library)
  cmake_parse_arguments(ARG "GRPC" "NAME;ROOT" "PROTOS;DEPS" ${ARGN})
  set(gen_dir ${CMAKE_BINARY_DIR}/generated)
  set(srcs)
  foreach(p ${ARG_PROTOS})
    get_filename_component(dir ${p} DIRECTORY)
    get_filename_component(stem ${p} NAME_WE)
    set(out ${gen_dir}/${dir}/${stem})
    set(outputs ${out}.pb.cc ${out}.pb.h)
    set(grpc_args)
    if(ARG_GRPC)
      list(APPEND outputs ${out}.grpc.pb.cc ${out}.grpc.pb.h)
      set(grpc_args --grpc_out=${gen_dir}
          --plugin=protoc-gen-grpc=$<TARGET_FILE:gRPC::grpc_cpp_plugin>)
    endif()
    add_custom_command(
      OUTPUT ${outputs}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${gen_dir}
      COMMAND protobuf::protoc --proto_path=${ARG_ROOT}
              --proto_path=${PROJECT_SOURCE_DIR}/proto --cpp_out=${gen_dir} ${grpc_args} ${p}
      DEPENDS ${ARG_ROOT}/${p}
      COMMENT "protoc ${p}"
      VERBATIM)
    list(FILTER outputs INCLUDE REGEX "\\.cc$")
    list(APPEND srcs ${outputs})
  endforeach()
  # Generated serialization code is the build's largest object (csi.pb.cc:
  # 35 s at -O2 -g on 2 cores); -O1 builds it in two thirds of the time and
  # CSI messages are small.
  set_source_files_properties(${srcs} PROPERTIES COMPILE_OPTIONS "$<$<CONFIG:RelWithDebInfo>:-O1>")
  add_library(${ARG_NAME} STATIC ${srcs})
  target_include_directories(${ARG_NAME} SYSTEM PUBLIC ${gen_dir})
  target_link_libraries(${ARG_NAME} PUBLIC protobuf::libprotobuf gRPC::grpc++ ${ARG_DEPS})
endfunction()
