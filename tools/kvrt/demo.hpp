// `kvrt demo`: a small llama-style model decoding through kvrt's KV cache.
#pragma once

namespace cli {

// Runs the demo with its command-line options (`kvrt demo --help`); returns
// the process exit code.
int cmd_demo(int argc, char** argv);

}  // namespace cli
