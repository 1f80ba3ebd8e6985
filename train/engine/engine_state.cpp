// Engine: a run's tensors and step state into a checkpoint and back (train/engine/engine.h). What a
// checkpoint holds:
//
// Tensors (names as the model and the optimizer give them):
//   "<param>"                  every parameter: the working weights, in the training dtype
//   "<param>.master", ...      the optimizer's state_tensors(): fp32 masters (fp16 training),
//                              "<param>.momentum" (SGD), "<param>.adam_m", "<param>.adam_v"
//   "<bn>.running_mean", "<bn>.running_var"   BatchNorm statistics (fp32)
//   "<param>.ema", "<bn>.running_mean.ema", "<bn>.running_var.ema"   --ema: the moving averages
//                              (fp32; the optimizer's state_tensors() end with them)
// Scalars: "loss_scale", "scaler_clean_steps", "scaler_consecutive_skips",
//   "scaler_skipped_total", "optimizer_steps_taken", plus what the caller adds (best_top1, the
//   epoch's validation metrics).
// Metadata (the Trainer's, train/engine/trainer_state.cpp): step (steps attempted: the schedule's
// clock), epoch (epochs completed), cursor (the next batch), seed, and the resolved
// configuration as JSON.
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>

#include "kernels/check.h"
#include "train/engine/engine.h"

namespace cutrain {

namespace {

// Copies `from` into `to` bit for bit (to may be on a GPU); both must have the same shape and
// dtype.
void copy_into(Tensor& to, const Tensor& from, const std::string& name) {
  CHECK(from.shape() == to.shape() && from.dtype() == to.dtype(),
        "checkpoint tensor '" << name << "' is " << from.str() << ", but this run has "
                              << to.str() << ": the checkpoint is of another model or precision");
  to.copy_from(from);
}

// The scalars a resume needs: the loss scaler's state and the optimizer's step count.
void put_scaler_state(Checkpoint& c, const LossScalerState& s, int64_t steps_taken) {
  c.scalars["loss_scale"] = s.scale;
  c.scalars["scaler_clean_steps"] = s.clean_steps;
  c.scalars["scaler_consecutive_skips"] = s.consecutive_skips;
  c.scalars["scaler_skipped_total"] = double(s.skipped_total);
  c.scalars["optimizer_steps_taken"] = double(steps_taken);
}

// Where a model's tensors come from: the tensor of that name, or null.
using FindTensor = std::function<const Tensor*(const std::string&)>;

// The model's parameters and BatchNorm statistics from `find`: with `averaged` their moving
// averages "<name>.ema" (fp32, converted to the model's dtype where it differs); else
// "<name>", or for a parameter of another dtype its "<name>.master" when that has the model's
// dtype, else converted. `where` names the source in errors.
void fill_model(Model& model, const FindTensor& find, bool averaged, const std::string& where) {
  auto set = [&](Tensor& to, const std::string& name) {
    const std::string key = averaged ? name + ".ema" : name;
    const Tensor* from = find(key);
    USER_CHECK(from, where << " has no tensor '" << key << "'");
    if (from->dtype() == to.dtype()) return copy_into(to, *from, key);
    const Tensor* master = averaged ? nullptr : find(name + ".master");
    if (master && master->dtype() == to.dtype()) return copy_into(to, *master, name + ".master");
    copy_into(to, from->to(to.dtype()), key);
  };
  for (const VarPtr& p : model.parameters()) set(p->value, p->name);
  for (auto& [name, t] : model.batchnorm_tensors()) set(*t, name);
}

double scalar(const Checkpoint& c, const char* name) {
  auto it = c.scalars.find(name);
  USER_CHECK(it != c.scalars.end(), "the checkpoint has no scalar '" << name << "'");
  return it->second;
}

}  // namespace

void Engine::snapshot(Checkpoint& c) {
  CHECK(!broken_, "snapshot: an earlier step failed partway, so the state is unknown");
  interrupt_clock();  // the copies go on the lanes between two steps
  const OnDevice on = on_device();
  // Copies the caller may keep while training goes on (the HDF5 write and the fsync happen on
  // the writer's thread). On a GPU, clones on the device, on the stream the tensors were made
  // on (the replica's compute stream), so after the queued steps: queued, no wait.
  for (auto& [name, t] : state_tensors(model(), optimizer()))
    c.tensors.emplace_back(name, t->clone());
  // The loss scaler and the step count after the last launched step: the step state's, copied
  // beside the clones (on a GPU queued after the steps; the host has not seen them yet).
  static_assert(sizeof(StepState) % sizeof(int32_t) == 0, "StepState copied as int32s");
  const int words = int(sizeof(StepState) / sizeof(int32_t));
  Lane& lane = *replicas_[0]->lane;
  Tensor state = Tensor::empty({words}, DType::i32, lane.context());
  lane.copy(state.raw(), lane.step().state(), sizeof(StepState));
  std::shared_ptr<Event> cloned;
  if (lane.where() == Device::cuda) {
    cloned = std::make_shared<Event>();
    cloned->record(lane.stream());
  }
  const int device = lane.device();
  const int max_skips = scaler_config_.max_consecutive_skips;
  c.pending = [cloned, state, device, max_skips](Checkpoint& ck) {
    if (cloned) {
      // Replica 0's device, and left so: no context is made on a GPU the run does not use by
      // switching back (the writer's thread has no other; the trainer's has this one already).
      set_device(device);
      cloned->synchronize();  // the clones and the state are complete
      // Each copy to the host is ordered on the clone's stream, the compute stream: it also
      // waits for the steps queued there since the snapshot. Only this writer's thread waits.
      for (auto& named : ck.tensors) named.second = named.second.to(Context::cpu());
    }
    StepState s;
    std::memcpy(&s, state.to(Context::cpu()).raw(), sizeof s);
    // The results of these steps may not have been read yet: if they end the run (too many
    // overflows in a row), this checkpoint must not be written (it would resume past the
    // stop). Their longest run of skips counts, not the last: a clean step after the limit
    // was reached resets the counter, but the run still stops at the limit.
    USER_CHECK(s.peak_skips < max_skips,
          "the checkpoint of step " << ck.step << " is not written: " << s.peak_skips
                                    << " steps in a row overflowed before it, and the run "
                                    << "stops at " << max_skips);
    put_scaler_state(ck, s.scaler, s.steps_taken);
  };
}

void Engine::restore(const Checkpoint& c) {
  interrupt_clock();
  CHECK(launched_.empty(), "restore: " << launched_.size() << " launched steps are pending");
  CHECK(!c.pending, "restore: the checkpoint is still pending (on its way from a GPU): "
                    "complete() it first");
  std::set<std::string> expected;
  for (auto& rep : replicas_) {  // every replica: they start the next step equal
    const OnDevice on(rep->lane->context());  // copies onto a replica's tensors: on its stream
    for (auto& [name, t] : state_tensors(*rep->model, *rep->optimizer)) {
      expected.insert(name);
      copy_into(*t, c.tensor(name), name);
    }
  }
  for (const auto& [name, t] : c.tensors)
    USER_CHECK(expected.count(name), "the checkpoint has a tensor '" << name
                                                                << "' that this model does not");
  LossScalerState saved;
  saved.scale = scalar(c, "loss_scale");
  saved.clean_steps = int32_t(scalar(c, "scaler_clean_steps"));
  saved.consecutive_skips = int32_t(scalar(c, "scaler_consecutive_skips"));
  saved.skipped_total = int64_t(scalar(c, "scaler_skipped_total"));
  // Checked, and made this run's (a fixed scale drops old skips: nn/loss_scaler.h).
  const LossScalerState s = loss_scaler_restored(scaler_config_, saved);
  const auto steps_taken = int64_t(scalar(c, "optimizer_steps_taken"));
  for (auto& rep : replicas_) {
    const OnDevice on(rep->lane->context());
    rep->lane->step().reset(s, steps_taken);
  }
}

Model& Engine::averaged_model() {
  Optimizer& opt = optimizer();
  USER_CHECK(opt.ema_decay() > 0, "the run keeps no moving average of its weights (--ema)");
  interrupt_clock();  // the copies go on the lane between two steps
  const OnDevice on = on_device();
  if (!averaged_) {  // the same model, on replica 0's device and stream (its options')
    averaged_ = build_model(model().spec(), model().options());
    if (!cfg_.kernel_plan.empty()) averaged_->set_kernel_plan(parse_kernel_plan(cfg_.kernel_plan));
  }
  std::map<std::string, const Tensor*> named;
  for (const auto& [name, t] : opt.state_tensors()) named[name] = t;
  fill_model(*averaged_, [&](const std::string& n) {
    const auto it = named.find(n);
    return it == named.end() ? nullptr : it->second;
  }, true, "the optimizer");
  return *averaged_;
}

WeightChoice parse_weight_choice(const std::string& text) {
  if (text == "auto") return WeightChoice::automatic;
  if (text == "ema") return WeightChoice::ema;
  if (text == "raw") return WeightChoice::raw;
  USER_CHECK(false, "--weights " << text << ": expected auto (the moving average when the "
                                 << "checkpoint has one), ema or raw");
  return WeightChoice::automatic;
}

bool has_average(const Checkpoint& c) {
  for (const auto& [name, t] : c.tensors)
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".ema") == 0) return true;
  return false;
}

namespace {
bool load_average(const Checkpoint& c, WeightChoice weights) {
  return weights == WeightChoice::ema || (weights == WeightChoice::automatic && has_average(c));
}
}  // namespace

const char* weights_loaded(const Checkpoint& c, WeightChoice weights) {
  return load_average(c, weights) ? "the weights' moving average" : "the weights";
}

std::unique_ptr<Model> load_model(const Checkpoint& c, const TrainConfig& cfg, DType dtype,
                                  const Context& in, WeightChoice weights) {
  const bool averaged = load_average(c, weights);
  USER_CHECK(!averaged || has_average(c),
             "--weights ema: the checkpoint holds no moving average of its weights (its run "
             "had no --ema)");
  ModelOptions mo;
  mo.H = mo.W = cfg.size;
  mo.C = cfg.channels;
  mo.classes = cfg.classes;
  mo.dtype = dtype;
  mo.seed = cfg.seed;
  mo.context = in;
  auto model = build_model(parse_model_spec(cfg.model_text, cfg.model), mo);
  if (!cfg.kernel_plan.empty()) model->set_kernel_plan(parse_kernel_plan(cfg.kernel_plan));
  std::map<std::string, const Tensor*> named;
  for (const auto& [name, t] : c.tensors) named[name] = &t;
  fill_model(*model, [&](const std::string& n) {
    const auto it = named.find(n);
    return it == named.end() ? nullptr : it->second;
  }, averaged, "the checkpoint");
  return model;
}

}  // namespace cutrain
