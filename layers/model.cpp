#include "layers/model.h"

#include <fmt/format.h>

#include "engine/core/error.h"
#include "layers/skip.h"

namespace pt {

Model::Model(Shape input_shape, DType input_dtype, std::vector<std::unique_ptr<Layer>> layers,
             std::unique_ptr<Loss> loss)
    : input_shape_(input_shape),
      input_dtype_(input_dtype),
      layers_(std::move(layers)),
      loss_(std::move(loss)) {
  if (layers_.empty()) throw ShapeError("a model needs at least one layer");
  if (!loss_)
    throw ShapeError("a model needs a loss: end the builder with .cross_entropy() or .mse()");
  loss_->check_input(output_shape());
  first_param_layer_ = num_layers();
  for (int l = num_layers() - 1; l >= 0; --l)
    if (layers_[static_cast<size_t>(l)]->param_count() > 0) first_param_layer_ = l;
  for (int l = 0; l < num_layers(); ++l)
    if (const auto* save =
            dynamic_cast<const SaveActivation*>(layers_[static_cast<size_t>(l)].get()))
      for (int k = l + 1; k < num_layers(); ++k)
        if (const auto* add = dynamic_cast<const AddSaved*>(layers_[static_cast<size_t>(k)].get());
            add && add->skip_name() == save->skip_name()) {
          skips_.push_back({save->skip_name(), l, k});
          break;
        }
}

const Shape& Model::output_shape() const { return layers_.back()->output_shape(); }

int64_t Model::param_count() const {
  int64_t n = 0;
  for (const auto& l : layers_) n += l->param_count();
  return n;
}

int64_t Model::unique_param_count() const {
  int64_t n = param_count();
  for (const ParameterTie& t : ties_) {
    const ParamRef& owner = t.members[0];
    const int64_t each = layer(owner.layer).param_specs().at(owner.param).shape.numel();
    n -= each * static_cast<int64_t>(t.members.size() - 1);
  }
  return n;
}

namespace {

std::string human(double v) {
  if (v >= 1e9) return fmt::format("{:.2f}G", v / 1e9);
  if (v >= 1e6) return fmt::format("{:.2f}M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:.1f}K", v / 1e3);
  return fmt::format("{:.0f}", v);
}

}  // namespace

std::string Model::summary() const {
  std::string out = fmt::format("{:>5}  {:<20} {:<18} {:>10} {:>12} {:>12}\n", "index", "name",
                                "output shape", "params", "FLOPs/sample", "act. bytes");
  out += fmt::format("{:>5}  {:<20} {:<18} {:>10} {:>12} {:>12}\n", "", "input", input_shape_.str(),
                     "", "", "");
  double flops = 0;
  int64_t act = 0;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = *layers_[i];
    const LayerCost c = l.cost();
    flops += c.forward_flops;
    act += c.activation_bytes;
    out += fmt::format("{:>5}  {:<20} {:<18} {:>10} {:>12} {:>12}\n", i, l.name(),
                       l.output_shape().str(), l.param_count(), human(c.forward_flops),
                       human(static_cast<double>(c.activation_bytes)));
  }
  out += fmt::format(
      "total: {} layers, {} parameters ({} bytes as f32), {} forward FLOPs and {} "
      "activation bytes per sample; loss: {}\n",
      layers_.size(), param_count(), param_count() * 4, human(flops),
      human(static_cast<double>(act)), loss_->kind());
  return out;
}

std::string Model::signature() const {
  if (!whole_signature_.empty()) return whole_signature_;
  std::string out = fmt::format("input {} {}\n", input_shape_.str(), dtype_name(input_dtype_));
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = *layers_[i];
    out +=
        fmt::format("{} {} {} -> {}", i, l.kind(), l.input_shape().str(), l.output_shape().str());
    for (const ParamSpec& p : l.param_specs()) out += fmt::format(" {}{}", p.name, p.shape.str());
    out += '\n';
  }
  for (const ParameterTie& t : ties_) {
    out += "tie";
    for (const ParamRef& m : t.members) out += fmt::format(" {}.{}", m.layer, m.param);
    out += '\n';
  }
  return out;
}

void Model::tie(int a, const std::string& a_param, int b, const std::string& b_param) {
  const auto find = [&](int layer, const std::string& name) {
    if (layer < 0 || layer >= num_layers())
      throw ShapeError(fmt::format("tie: layer {} does not exist (the model has {} layers)", layer,
                                   num_layers()));
    const auto specs = this->layer(layer).param_specs();
    for (size_t i = 0; i < specs.size(); ++i)
      if (specs[i].name == name) return std::pair{ParamRef{layer, i}, specs[i].shape};
    throw ShapeError(fmt::format("tie: layer {} ({}) has no parameter '{}'", layer,
                                 this->layer(layer).name(), name));
  };
  auto [ra, sa] = find(a, a_param);
  auto [rb, sb] = find(b, b_param);
  if (ra == rb) throw ShapeError(fmt::format("tie: {}.{} cannot be tied to itself", a, a_param));
  if (sa != sb)
    throw ShapeError(
        fmt::format("tie: {}.{} has shape {} but {}.{} has {}: tied parameters need one shape", a,
                    a_param, sa.str(), b, b_param, sb.str()));
  if (tie_of(ra) || tie_of(rb))
    throw ShapeError(fmt::format("tie: {}.{} or {}.{} is already tied", a, a_param, b, b_param));
  ParameterTie t;
  t.members = ra < rb ? std::vector{ra, rb} : std::vector{rb, ra};
  ties_.push_back(std::move(t));
}

const ParameterTie* Model::tie_of(const ParamRef& ref) const {
  for (const ParameterTie& t : ties_)
    for (const ParamRef& m : t.members)
      if (m == ref) return &t;
  return nullptr;
}

std::string parameter_name(int global_layer_index, const Layer& layer, const std::string& param) {
  return fmt::format("{}.{}.{}", global_layer_index, layer.name(), param);
}

}  // namespace pt
