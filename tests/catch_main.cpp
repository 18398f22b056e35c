// The Catch2 main shared by the test programs. Every context of a GPU test
// runs under the Khronos validation layer: KVRT_VALIDATION is 1 unless the
// environment already chose (KVRT_VALIDATION=gpu: GPU-assisted validation,
// make test-gpu-av).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdlib>

int main(int argc, char* argv[]) {
    setenv("KVRT_VALIDATION", "1", 0);
    return Catch::Session().run(argc, argv);
}
