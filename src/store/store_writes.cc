// The store's writes: create, update and delete, each a mutation the writer
// thread commits (store.cc) through a transaction (store_internal.h).
#include "store/store.h"

#include <utility>
#include <vector>

#include "store/store_internal.h"

namespace berth::store {

// ---- Writes ----

namespace {

// Checks a new object and sets the metadata the store owns.
absl::Status PrepareCreate(Object& obj) {
  if (!obj.is_object()) return absl::InvalidArgumentError("object must be a JSON object");
  Object& md = obj["metadata"];
  if (!md.is_object()) return absl::InvalidArgumentError("metadata must be an object");
  if (Str(md, "name").empty()) {
    const std::string gen = Str(md, "generateName");
    if (gen.empty()) return absl::InvalidArgumentError("metadata.name or metadata.generateName is required");
    md["name"] = gen + RandomSuffix();
  }
  // Cluster-scoped objects have no metadata.namespace (as in Kubernetes);
  // the table's namespace column is "" for them.
  if (md.contains("namespace") && Str(md, "namespace").empty()) md.erase("namespace");
  md["uid"] = NewUid();
  md["creationTimestamp"] = Now();
  md["generation"] = 1;
  md.erase("deletionTimestamp");
  md.erase("resourceVersion");
  return absl::OkStatus();
}

}  // namespace

std::function<absl::StatusOr<Store::ObjectPtr>(Store::Txn&)> Store::CreateFn(const std::string& resource, Object obj) {
  // The writer runs a mutation once (a failed batch fails all of its
  // mutations; nothing is run again), so the object is moved, not copied, in
  // the thread every write waits for.
  return [resource, obj = std::move(obj)](Txn& txn) mutable -> absl::StatusOr<ObjectPtr> {
    return txn.Put(resource, std::move(obj), EventType::kAdded, nullptr);  // ALREADY_EXISTS when taken
  };
}

absl::StatusOr<Object> Store::Create(const std::string& resource, Object obj) {
  return Copy(CreateShared(resource, std::move(obj)));
}

absl::StatusOr<Store::ObjectPtr> Store::CreateShared(const std::string& resource, Object obj, TextPtr* text) {
  if (absl::Status st = PrepareCreate(obj); !st.ok()) return st;
  return Submit(CreateFn(resource, std::move(obj)), text);
}

std::vector<absl::StatusOr<Object>> Store::CreateAll(const std::string& resource, std::vector<Object> objects) {
  std::vector<absl::StatusOr<Object>> out(objects.size(), absl::UnknownError(""));
  std::vector<std::shared_ptr<Mutation>> queued;
  std::vector<size_t> at;
  for (size_t i = 0; i < objects.size(); ++i) {
    if (absl::Status st = PrepareCreate(objects[i]); !st.ok()) {
      out[i] = st;
      continue;
    }
    auto m = std::make_shared<Mutation>();
    m->fn = CreateFn(resource, std::move(objects[i]));
    queued.push_back(std::move(m));
    at.push_back(i);
  }
  {
    absl::MutexLock lock(&queue_mu_);
    if (stopping_) {
      for (size_t i : at) out[i] = absl::UnavailableError("store is closing");
      return out;
    }
    // Queued together: they go into the same group commit (one fsync).
    for (const auto& m : queued) queue_.push_back(m);
  }
  for (size_t k = 0; k < queued.size(); ++k) out[at[k]] = Copy(queued[k]->done.Take());
  return out;
}

absl::StatusOr<Object> Store::Update(const std::string& resource, Object obj) {
  return Copy(UpdateShared(resource, std::move(obj)));
}

absl::StatusOr<Store::ObjectPtr> Store::UpdateShared(const std::string& resource, Object obj) {
  if (!obj.is_object() || !obj["metadata"].is_object()) {
    return absl::InvalidArgumentError("metadata must be an object");
  }
  return Submit([resource, obj = std::move(obj)](Txn& txn) mutable -> absl::StatusOr<ObjectPtr> {
    const std::string ns = Namespace(obj), name = Name(obj);
    auto loaded = txn.Load(resource, ns, name);
    if (!loaded.ok()) return loaded.status();
    if (*loaded == nullptr) return absl::NotFoundError(StrCat(resource, " \"", name, "\" not found"));
    const Object& stored = **loaded;
    const std::string want_rv = Str(obj["metadata"], "resourceVersion");
    const std::string have_rv = Str(stored["metadata"], "resourceVersion");
    if (!want_rv.empty() && want_rv != have_rv) {
      return absl::AbortedError(
          StrCat("Operation cannot be fulfilled on ", resource, " \"", name,
                 "\": the object has been modified; please apply your changes to the latest version "
                 "and try again"));
    }
    Object& md = obj["metadata"];
    const Object& smd = stored["metadata"];
    if (md.contains("uid") && !Str(md, "uid").empty() && md["uid"] != smd["uid"]) {
      return absl::AbortedError(StrCat("Precondition failed: UID in precondition: ", Str(md, "uid"),
                                       ", UID in object meta: ", Str(smd, "uid")));
    }
    md["uid"] = smd["uid"];
    md["creationTimestamp"] = smd["creationTimestamp"];
    if (std::string stored_ns = Str(smd, "namespace"); !stored_ns.empty()) {
      md["namespace"] = stored_ns;
    } else {
      md.erase("namespace");
    }
    for (const char* field : {"deletionTimestamp", "deletionGracePeriodSeconds"}) {
      if (smd.contains(field)) {
        md[field] = smd[field];
      } else {
        md.erase(field);
      }
    }
    int64_t generation = smd.value("generation", 1);
    if (Spec(obj) != Spec(stored)) ++generation;
    md["generation"] = generation;
    if (md.contains("deletionTimestamp") && !HasFinalizers(obj) &&
        md.value("deletionGracePeriodSeconds", int64_t{0}) == 0) {
      // The last finalizer is gone (and no graceful deletion is pending): the
      // object goes.
      const size_t at = txn.events.size();
      if (absl::Status st = txn.Remove(resource, std::move(obj)); !st.ok()) return st;
      return txn.events[at].event.object;
    }
    return txn.Put(resource, std::move(obj), EventType::kModified, *loaded);
  });
}

absl::StatusOr<Object> Store::Delete(const std::string& resource, const std::string& ns, const std::string& name,
                                     const std::optional<std::string>& expected_uid,
                                     std::optional<int64_t> grace_period_seconds) {
  return Copy(Submit([=](Txn& txn) -> absl::StatusOr<ObjectPtr> {
    auto loaded = txn.Load(resource, ns, name);
    if (!loaded.ok()) return loaded.status();
    if (*loaded == nullptr) return absl::NotFoundError(StrCat(resource, " \"", name, "\" not found"));
    const Object& stored = **loaded;
    if (expected_uid && Str(stored["metadata"], "uid") != *expected_uid) {
      return absl::AbortedError(StrCat("Precondition failed: UID in precondition: ", *expected_uid,
                                       ", UID in object meta: ", Str(stored["metadata"], "uid")));
    }
    const Object& smd = stored["metadata"];
    const bool deleting = smd.contains("deletionTimestamp");
    const int64_t current_grace = smd.value("deletionGracePeriodSeconds", int64_t{0});
    if (grace_period_seconds && *grace_period_seconds > 0) {
      // Graceful: mark with the time by which the object should be gone. A
      // deletion already pending keeps its earlier deadline (a grace period
      // may only shrink, as in Kubernetes).
      if (deleting && (!smd.contains("deletionGracePeriodSeconds") || current_grace <= *grace_period_seconds)) {
        return *loaded;
      }
      Object obj = stored;
      obj["metadata"]["deletionTimestamp"] = absl::FormatTime(
          "%Y-%m-%dT%H:%M:%SZ", absl::Now() + absl::Seconds(*grace_period_seconds), absl::UTCTimeZone());
      obj["metadata"]["deletionGracePeriodSeconds"] = *grace_period_seconds;
      return txn.Put(resource, std::move(obj), EventType::kModified, *loaded);
    }
    if (HasFinalizers(stored)) {
      if (deleting && current_grace > 0) {
        // A graceful deletion made final: finalizers alone keep it now.
        Object obj = stored;
        obj["metadata"]["deletionGracePeriodSeconds"] = 0;
        return txn.Put(resource, std::move(obj), EventType::kModified, *loaded);
      }
      return txn.DeleteOrMark(resource, stored, *loaded);
    }
    if (absl::Status st = txn.Remove(resource, stored); !st.ok()) return st;
    return txn.events.front().event.object;
  }));
}

}  // namespace berth::store
