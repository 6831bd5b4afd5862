# The Python the tests run: the pinned virtual environment tests/install-deps.sh makes
# (torch, diffusers, redis-py, pytest; tests/python-requirements.txt). KILN_TEST_PYTHON
# names its interpreter. Its torch wheel carries libtorch with a CMake config, so the
# libtorch helper (client/torch, kiln_torch) is built and tested with it too.
set(KILN_TEST_VENV "$ENV{KILN_TEST_VENV}")
if(NOT KILN_TEST_VENV)
  set(KILN_TEST_VENV /opt/kiln/test-venv)
endif()
set(KILN_TEST_PYTHON "${KILN_TEST_VENV}/bin/python" CACHE FILEPATH
    "Python of the tests' pinned environment (tests/install-deps.sh)")
execute_process(
  COMMAND "${KILN_TEST_PYTHON}" -c "import torch, diffusers, accelerate, peft, redis, pytest; print(torch.utils.cmake_prefix_path)"
  OUTPUT_VARIABLE kiln_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
  ERROR_VARIABLE kiln_test_python_error RESULT_VARIABLE kiln_test_python_rc)
if(NOT kiln_test_python_rc EQUAL 0)
  message(FATAL_ERROR "kiln: the tests need the pinned Python environment at ${KILN_TEST_VENV} "
    "(run tests/install-deps.sh, or set KILN_TEST_PYTHON; -DKILN_BUILD_TESTS=OFF builds without tests):\n"
    "${kiln_test_python_error}")
endif()
list(APPEND CMAKE_PREFIX_PATH "${kiln_torch_prefix}")
message(STATUS "kiln: tests run ${KILN_TEST_PYTHON} (libtorch from ${kiln_torch_prefix})")
