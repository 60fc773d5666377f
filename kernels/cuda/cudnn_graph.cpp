#include "kernels/cuda/cudnn_graph.h"

#include <fmt/format.h>

#include <algorithm>

namespace pt::cuda::cudnn_graph {

void check(cudnnStatus_t s, const std::string& what) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  char last[512] = {};
  cudnnGetLastErrorString(last, sizeof last);
  throw Refused(fmt::format("{}: {} ({}){}{}", what, cudnnGetErrorString(s), static_cast<int>(s),
                            last[0] ? ": " : "", last));
}

Descriptor::Descriptor(cudnnBackendDescriptorType_t type) {
  check(cudnnBackendCreateDescriptor(type, &d_),
        fmt::format("cudnnBackendCreateDescriptor({})", static_cast<int>(type)));
}

Descriptor::~Descriptor() {
  if (d_) (void)cudnnBackendDestroyDescriptor(d_);
}

void Descriptor::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                     int64_t count, const void* values, const char* what) {
  check(cudnnBackendSetAttribute(d_, name, type, count, values),
        fmt::format("{}: setting attribute {}", what, static_cast<int>(name)));
}

void Descriptor::finalize(const char* what) {
  check(cudnnBackendFinalize(d_), fmt::format("{}: finalize", what));
}

// ---- tensors ------------------------------------------------------------------------------

namespace {
Descriptor make_tensor(Uid uid, const Dims& dims, const Dims& strides, cudnnDataType_t type,
                       bool is_virtual, bool by_value) {
  Descriptor t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t alignment = 16;
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "tensor");
  t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, static_cast<int64_t>(dims.size()),
        dims.data(), "tensor");
  t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, static_cast<int64_t>(strides.size()),
        strides.data(), "tensor");
  t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor");
  t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment, "tensor");
  t.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, "tensor");
  if (by_value) t.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, "tensor");
  t.finalize(fmt::format("tensor {} ({} dims, type {})", uid, dims.size(), static_cast<int>(type))
                 .c_str());
  return t;
}

void set_descriptor(Descriptor& op, cudnnBackendAttributeName_t name, const Descriptor& value,
                    const char* what) {
  cudnnBackendDescriptor_t d = value.get();
  op.set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d, what);
}
}  // namespace

Uid Graph::tensor(const Dims& dims, const Dims& strides, cudnnDataType_t type, bool is_virtual) {
  const Uid uid = next_uid_++;
  tensors_[uid] =
      std::make_shared<Descriptor>(make_tensor(uid, dims, strides, type, is_virtual, false));
  return uid;
}

Uid Graph::scalar(float value) {
  const Uid uid = next_uid_++;
  const Dims one{1, 1, 1, 1};
  tensors_[uid] =
      std::make_shared<Descriptor>(make_tensor(uid, one, one, CUDNN_DATA_FLOAT, false, true));
  scalars_[uid] = value;
  return uid;
}

Descriptor& Graph::tensor_descriptor(Uid uid) const {
  const auto it = tensors_.find(uid);
  if (it == tensors_.end()) throw Refused(fmt::format("cuDNN graph: no tensor with uid {}", uid));
  return *it->second;
}

// ---- operations ---------------------------------------------------------------------------

// y = mode(x[, b[, t]]); uid 0: no such input.
void Graph::pointwise_op(cudnnPointwiseMode_t mode, cudnnDataType_t compute, int64_t axis, Uid x,
                         Uid b, Uid t, Uid y) {
  auto pw = std::make_shared<Descriptor>(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  pw->set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise");
  pw->set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &compute, "pointwise");
  if (axis >= 0) pw->set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "pointwise");
  pw->finalize(fmt::format("pointwise mode {}", static_cast<int>(mode)).c_str());
  Descriptor op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  set_descriptor(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, *pw, "pointwise op");
  set_descriptor(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, tensor_descriptor(x), "pointwise op");
  if (b)
    set_descriptor(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, tensor_descriptor(b), "pointwise op");
  if (t)
    set_descriptor(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, tensor_descriptor(t), "pointwise op");
  set_descriptor(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, tensor_descriptor(y), "pointwise op");
  op.finalize(
      fmt::format("pointwise op mode {} ({}, {}, {} -> {})", static_cast<int>(mode), x, b, t, y)
          .c_str());
  op_configs_.push_back(std::move(pw));
  add(std::move(op));
}

void Graph::pointwise(cudnnPointwiseMode_t mode, Uid x, Uid y, cudnnDataType_t compute,
                      int64_t axis) {
  pointwise_op(mode, compute, axis, x, 0, 0, y);
}

void Graph::pointwise(cudnnPointwiseMode_t mode, Uid x, Uid b, Uid y, cudnnDataType_t compute) {
  pointwise_op(mode, compute, -1, x, b, 0, y);
}

void Graph::pointwise(cudnnPointwiseMode_t mode, Uid x, Uid b, Uid t, Uid y) {
  pointwise_op(mode, CUDNN_DATA_FLOAT, -1, x, b, t, y);
}

void Graph::matmul(Uid a, Uid b, Uid c) {
  auto mm = std::make_shared<Descriptor>(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  mm->set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute, "matmul");
  mm->finalize("matmul");
  Descriptor op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  set_descriptor(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, tensor_descriptor(a), "matmul op");
  set_descriptor(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, tensor_descriptor(b), "matmul op");
  set_descriptor(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, tensor_descriptor(c), "matmul op");
  set_descriptor(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, *mm, "matmul op");
  op.finalize(fmt::format("matmul op ({} x {} -> {})", a, b, c).c_str());
  op_configs_.push_back(std::move(mm));
  add(std::move(op));
}

void Graph::reduction(cudnnReduceTensorOp_t reduce, Uid x, Uid y) {
  auto rd = std::make_shared<Descriptor>(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  rd->set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce,
          "reduction");
  rd->set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute, "reduction");
  rd->finalize("reduction");
  Descriptor op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  set_descriptor(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, tensor_descriptor(x), "reduction op");
  set_descriptor(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, tensor_descriptor(y), "reduction op");
  set_descriptor(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, *rd, "reduction op");
  op.finalize(fmt::format("reduction op {} ({} -> {})", static_cast<int>(reduce), x, y).c_str());
  op_configs_.push_back(std::move(rd));
  add(std::move(op));
}

void Graph::reshape(Uid x, Uid y) {
  Descriptor op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  set_descriptor(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, tensor_descriptor(x), "reshape op");
  set_descriptor(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, tensor_descriptor(y), "reshape op");
  op.finalize(fmt::format("reshape op ({} -> {})", x, y).c_str());
  add(std::move(op));
}

// ---- plan and execution -------------------------------------------------------------------

namespace {
bool deterministic_engine(const Descriptor& config) {
  Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t e = engine.get();
  int64_t got = 0;
  check(cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got, &e),
        "engine config: its engine");
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  int64_t count = 0;
  check(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &count, notes),
        "engine: its numerical notes");
  return std::none_of(notes, notes + count, [](cudnnBackendNumericalNote_t n) {
    return n == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
  });
}

int64_t engine_index(const Descriptor& config) {
  Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t e = engine.get();
  int64_t got = 0, index = -1;
  if (cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got, &e) != CUDNN_STATUS_SUCCESS)
    return -1;
  (void)cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &got,
                                 &index);
  return index;
}
}  // namespace

std::shared_ptr<Descriptor> Graph::operation_graph(cudnnHandle_t handle) const {
  auto graph = std::make_shared<Descriptor>(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  std::vector<cudnnBackendDescriptor_t> ops;
  for (const auto& op : ops_) ops.push_back(op->get());
  graph->set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
             static_cast<int64_t>(ops.size()), ops.data(), "operation graph");
  if (handle)
    graph->set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "operation graph");
  graph->finalize(fmt::format("operation graph of {} ops", ops.size()).c_str());
  return graph;
}

Plan Graph::build(cudnnHandle_t handle, bool deterministic) const {
  Plan out;
  out.keep_alive.insert(out.keep_alive.end(), ops_.begin(), ops_.end());
  out.keep_alive.insert(out.keep_alive.end(), op_configs_.begin(), op_configs_.end());
  for (const auto& [uid, t] : tensors_) out.keep_alive.push_back(t);
  out.scalars = scalars_;

  const std::shared_ptr<Descriptor> graph = operation_graph(handle);
  out.keep_alive.push_back(graph);

  Descriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  cudnnBackendDescriptor_t g = graph->get();
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  heuristics.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g,
                 "heuristics");
  heuristics.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics");
  heuristics.finalize("heuristics");
  int64_t count = 0;
  check(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
        "heuristics: how many engine configs");
  if (count == 0) throw Refused("cuDNN's heuristics offer no engine for this graph");
  std::vector<std::shared_ptr<Descriptor>> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    configs.push_back(std::make_shared<Descriptor>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    raw.push_back(configs.back()->get());
  }
  int64_t got = 0;
  check(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, raw.data()),
        "heuristics: the engine configs");

  std::string last = "no engine config";
  for (int64_t i = 0; i < got; ++i) {
    const auto& config = configs[static_cast<size_t>(i)];
    try {
      if (deterministic && !deterministic_engine(*config)) {
        last = fmt::format("engine {} is non-deterministic", engine_index(*config));
        continue;
      }
      auto plan = std::make_shared<Descriptor>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      cudnnBackendDescriptor_t c = config->get();
      plan->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "plan");
      plan->set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c,
                "plan");
      plan->finalize("execution plan");
      int64_t n = 0;
      check(cudnnBackendGetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                     CUDNN_TYPE_INT64, 1, &n, &out.workspace_bytes),
            "plan: workspace size");
      out.plan = std::move(plan);
      out.engine =
          fmt::format("engine {} (heuristics' choice {} of {})", engine_index(*config), i + 1, got);
      out.keep_alive.push_back(config);
      return out;
    } catch (const Refused& e) {
      last = e.what();
    }
  }
  throw Refused(fmt::format("none of the {} engine configs cuDNN offered works{}: {}", got,
                            deterministic ? " deterministically" : "", last));
}

void Graph::execute(cudnnHandle_t handle, const Plan& plan, const std::map<Uid, void*>& pointers,
                    void* workspace) {
  std::vector<int64_t> uids;
  std::vector<void*> data;
  for (const auto& [uid, p] : pointers) {
    uids.push_back(uid);
    data.push_back(p);
  }
  // By-value scalars are read from host memory: the plan's own copies.
  for (const auto& [uid, value] : plan.scalars) {
    uids.push_back(uid);
    data.push_back(const_cast<float*>(&value));
  }
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()),
           uids.data(), "variant pack");
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
           static_cast<int64_t>(data.size()), data.data(), "variant pack");
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace, "variant pack");
  pack.finalize("variant pack");
  check(cudnnBackendExecute(handle, plan.plan->get(), pack.get()),
        fmt::format("cudnnBackendExecute ({})", plan.engine));
}

}  // namespace pt::cuda::cudnn_graph
