import Foundation

/// Which of the logs found can be applied now, in which order, under causal delivery: a
/// device's logs apply in their numbers' order, each after the logs of other devices its writer
/// had applied when it wrote it (``SyncPayload/dependencies``). Pure: no I/O.
struct CausalPlan {
    /// A log found in the container, with what it depends on.
    struct Candidate {
        var url: URL
        var log: LogFile
        var dependencies: [String: UInt64]
        /// The payload's size in bytes.
        var size = 0
        /// Another version of a log applied already (``ScanReport/lateVersions``).
        var late = false
    }

    /// Why a device's next log cannot be applied yet.
    enum Block: Hashable {
        /// The device's next log is not there (missing, still arriving or damaged).
        case missing(device: String, sequence: UInt64)
        /// The device's next log waits for another device's log that is not applied.
        case waiting(device: String, sequence: UInt64, on: String, through: UInt64)
    }

    /// The logs to apply, in an order that respects every dependency.
    var order: [Candidate] = []
    /// Where each blocked device stands, with the log it needs.
    var blocks: [Block] = []
    /// What is applied once `order` is.
    var applied: [String: AppliedLogs]

    /// Plans from what is applied (`applied`) and what was found (`candidates`). Dependencies on
    /// `assumedDevice` (this device's own logs, when they are not being imported) always hold.
    init(applied: [String: AppliedLogs], candidates: [Candidate], assumedDevice: String?) {
        self.applied = applied
        var queues: [String: [Candidate]] = [:]
        for candidate in candidates { queues[candidate.log.device, default: []].append(candidate) }
        for device in queues.keys { queues[device]!.sort { $0.log.sequence < $1.log.sequence } }
        var heads = queues.mapValues { _ in 0 }
        let devices = queues.keys.sorted()
        func satisfied(_ dependencies: [String: UInt64]) -> Bool {
            dependencies.allSatisfy { device, through in
                device == assumedDevice || (self.applied[device]?.through ?? 0) >= through
            }
        }
        var progress = true
        while progress {
            progress = false
            for device in devices {
                let queue = queues[device]!
                while heads[device]! < queue.count {
                    let next = queue[heads[device]!]
                    let mark = self.applied[device, default: AppliedLogs()]
                    if mark.contains(next.log.sequence) {
                        heads[device]! += 1
                        continue
                    }
                    // (A log that names one of its own device as its predecessor follows it,
                    // whatever the numbers between: see `AppliedLogs.insert(_:following:)`.)
                    let previous = next.dependencies[device]
                    guard mark.isNext(next.log.sequence, following: previous), satisfied(next.dependencies) else {
                        // A log further on that follows one applied already (its device's
                        // numbering leapt) need not wait for those it leaps over: they come as
                        // late versions, whenever they can.
                        let rest = queue[heads[device]!...]
                        guard
                            let jump = rest.firstIndex(where: { candidate in
                                candidate.dependencies[device].map { $0 <= mark.through } == true
                                    && candidate.log.sequence > mark.through + 1 && satisfied(candidate.dependencies)
                            })
                        else { break }
                        order.append(queue[jump])
                        _ = self.applied[device, default: AppliedLogs()].insert(
                            queue[jump].log.sequence,
                            following: queue[jump].dependencies[device]
                        )
                        heads[device] = jump + 1
                        progress = true
                        continue
                    }
                    order.append(next)
                    _ = self.applied[device, default: AppliedLogs()].insert(
                        next.log.sequence,
                        following: previous
                    )
                    heads[device]! += 1
                    progress = true
                }
            }
        }
        // What stays blocked, and on what.
        var needed: [String: UInt64] = [:]
        for device in devices where heads[device]! < queues[device]!.count {
            let next = queues[device]![heads[device]!]
            let through = self.applied[device]?.through ?? 0
            if !(self.applied[device] ?? AppliedLogs()).isNext(
                next.log.sequence,
                following: next.dependencies[device]
            ) {
                blocks.append(.missing(device: device, sequence: through + 1))
                continue
            }
            for (other, wanted) in next.dependencies.sorted(by: { $0.key < $1.key })
            where other != assumedDevice && (self.applied[other]?.through ?? 0) < wanted {
                blocks.append(.waiting(device: device, sequence: next.log.sequence, on: other, through: wanted))
                needed[other] = max(needed[other] ?? 0, wanted)
            }
        }
        // A dependency on a device whose next log is not among the candidates at all: missing.
        for (other, _) in needed.sorted(by: { $0.key < $1.key })
        where (queues[other].map { heads[other]! >= $0.count } ?? true) {
            blocks.append(.missing(device: other, sequence: (self.applied[other]?.through ?? 0) + 1))
        }
    }

    /// `order` in batches of at most `logs` logs and about `bytes` bytes of payload (at least one
    /// log each): an import's memory follows the batch, however large the logs.
    /// The first batch of `order`: at most `logs` logs and about `bytes` payload bytes (at least
    /// one log).
    static func batch(of order: ArraySlice<Candidate>, logs: Int, bytes: Int) -> ArraySlice<Candidate> {
        var size = 0
        for index in order.indices {
            if index > order.startIndex, index - order.startIndex >= logs || size + order[index].size > bytes {
                return order[order.startIndex..<index]
            }
            size += order[index].size
        }
        return order
    }

    /// The logs that are missing: what healing asks for.
    var missing: [(device: String, sequence: UInt64)] {
        blocks.compactMap {
            if case .missing(let device, let sequence) = $0 { return (device, sequence) }
            return nil
        }
    }
}
