// SelfOwned<T>: the one lifetime rule for mlaserve's asynchronous objects (gRPC reactors, the
// router's Generate calls, one-shot client calls): shared ownership, where the object holds a
// reference to itself from its creation until its terminal event.
//
//   class StreamReactor : public grpc::ServerWriteReactor<Msg>,
//                         public common::SelfOwned<StreamReactor> { ...
//     void OnDone() override { ReleaseSelf(); }  // the terminal event; the last statement
//   };
//   auto reactor = common::MakeSelfOwned<StreamReactor>(args...);  // it holds itself
//   reactor->Start(...);                                            // may take SelfRef()s
//   return reactor.get();                                           // gRPC gets a pointer
//
// Who else may reach the object holds a reference for as long as it may call into it: a
// completion callback captures SelfRef() (a shared_ptr); a runner that pushes into a stream
// holds a shared_ptr; a table that must not keep it alive holds a weak_ptr and locks it to
// call. Nothing calls `delete`.
//
// Why this is safe:
//  * The terminal event is the last call the object gets from its driver (gRPC's OnDone for a
//    reactor; the client's OnDone for a Generate call; the completion callback of a one-shot
//    call). The self-reference is taken before the object is handed to anyone and dropped only
//    there, so the driver never calls into a freed object; every other caller holds its own
//    reference while it calls.
//  * Who holds the last reference destroys the object, on its own thread: the terminal event
//    (if nothing else holds one), or the last holder afterwards (the decode loop after its last
//    token push, a worker call's callback). Either way it happens after every use returned.
//  * Cancellation never frees. OnCancel, a client gone, an Abort only record the intent and
//    lead to Finish; the terminal event follows Finish, and only it releases. A cancellation
//    racing with a write completion, a token push or a worker's answer finds the object alive.
//    After the terminal event the object must ignore calls (a runner's late push): it stays
//    alive for them but must not touch its driver again.
//  * ReleaseSelf moves the reference into a local that dies as the function returns, so no
//    member is touched after the object may be gone. Releasing twice is harmless.
#pragma once

#include <memory>
#include <utility>

namespace mlaserve::common {

template <typename T>
class SelfOwned : public std::enable_shared_from_this<T> {
 public:
  SelfOwned(const SelfOwned&) = delete;
  SelfOwned& operator=(const SelfOwned&) = delete;

 protected:
  SelfOwned() = default;
  ~SelfOwned() = default;

  // A strong reference for whoever may call into the object later (a callback, a runner).
  std::shared_ptr<T> SelfRef() { return this->shared_from_this(); }

  // The terminal event: drops the self-reference. `this` may be destroyed when this returns,
  // so call it last and touch no member afterwards.
  void ReleaseSelf() {
    std::shared_ptr<T> last = std::move(self_);
  }

 private:
  template <typename U, typename... Args>
  friend std::shared_ptr<U> MakeSelfOwned(Args&&... args);

  std::shared_ptr<T> self_;
};

// Creates a T that holds itself until it calls ReleaseSelf(); returns a reference for the
// creator's own use (it may be dropped at once).
template <typename T, typename... Args>
std::shared_ptr<T> MakeSelfOwned(Args&&... args) {
  std::shared_ptr<T> object = std::make_shared<T>(std::forward<Args>(args)...);
  static_cast<SelfOwned<T>&>(*object).self_ = object;
  return object;
}

}  // namespace mlaserve::common
