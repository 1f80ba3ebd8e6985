// Fuzz target: the training configuration a checkpoint carries (train/setup/config.h: the JSON of
// its config_json attribute, which `--resume`, `cutrain eval` and `cutrain predict` trust to
// rebuild the run). The checkpoint's checksum guards against damage, not against a file made
// on purpose, so the text is fed here directly:
// config_from_json_text, resolve_defaults, validate_config, then for a valid configuration
// the model description it holds (parse_model_spec of model_text) and a round trip through
// config_to_json_text, which must read back to the same JSON.
#include <string>

#include "fuzz/feed.h"
#include "nn/model_spec.h"
#include "train/setup/config.h"

namespace cutrain_fuzz {

Outcome feed_checkpoint_config(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  return refuse_errors([&] {
    cutrain::TrainConfig c = cutrain::config_from_json_text(text, "config_json");
    cutrain::resolve_defaults(c);
    cutrain::validate_config(c);
    // What a checkpoint of this run would hold: it must read back, and to the same JSON (a
    // refusal here is a finding, not a clean "no").
    const std::string saved = cutrain::config_to_json_text(c);
    std::string again;
    try {
      again = cutrain::config_to_json_text(cutrain::config_from_json_text(saved, "saved"));
    } catch (const cutrain::Error& e) {
      fuzz_require(false, "a valid configuration reads back: " + std::string(e.what()));
    }
    fuzz_require(again == saved, "a valid configuration reads back as saved:\n" + saved);
    if (!c.model_text.empty()) (void)cutrain::parse_model_spec(c.model_text, c.model);
  });
}

}  // namespace cutrain_fuzz

CUTRAIN_FUZZ_TARGET(cutrain_fuzz::feed_checkpoint_config)
