import Foundation
import Persistence
import SyncTestKit
import Testing

/// Seeds: 25 per model in `make test` (a smoke run: about 55 s a model on two busy cores, since
/// lifecycle steps and every device file travelling made a seed about 2 s), `make soak` sets
/// CONCORD_SYNC_SEEDS=2000; CONCORD_SYNC_FIRST_SEED (default 1) starts the range elsewhere;
/// CONCORD_SYNC_FULL_TRACE=1 prints a failing seed's whole trace. Two models run the same seeds:
/// lost stores restored on the same machine, and (`devicesConvergeOnNewMachines`) half of them on
/// a new machine, whose copy of the container refills from the others while it syncs (the model
/// of the restore leap).
let convergenceSeeds: [UInt64] = {
    let environment = ProcessInfo.processInfo.environment
    let count = environment["CONCORD_SYNC_SEEDS"].flatMap(Int.init) ?? 25
    let first = environment["CONCORD_SYNC_FIRST_SEED"].flatMap(UInt64.init) ?? 1
    return (first..<first + UInt64(max(count, 1))).map { $0 }
}()

@Suite("Sync convergence")
struct SyncConvergenceTests {
    @Test(
        "Four devices of one to three processes each, editing at random, with damaged files, pauses, disables and rejoins, and lost stores, converge whatever the delivery order",
        arguments: convergenceSeeds
    )
    func devicesConverge(seed: UInt64) throws {
        try converge(seed: seed, newMachines: false)
    }

    @Test(
        "The same, with half the lost stores restored on a new machine whose copy of the container refills while it syncs",
        arguments: convergenceSeeds
    )
    func devicesConvergeOnNewMachines(seed: UInt64) throws {
        try converge(seed: seed, newMachines: true)
    }

    /// Runs seed `seed` of a model: 60 random steps, settle, compare; compact everywhere,
    /// compare; 30 steps more, settle, compare.
    func converge(seed: UInt64, newMachines: Bool) throws {
        let simulator = try SyncSimulator(
            seed: seed,
            devices: 4,
            processes: 1...3,
            lifecycle: true,
            newMachines: newMachines
        )
        do {
            try converge(simulator, seed: seed)
        } catch {
            if ProcessInfo.processInfo.environment["CONCORD_SYNC_FULL_TRACE"] != nil {
                print("FULLTRACE\n" + simulator.trace.filter { !$0.contains("deliver") }.joined(separator: "\n"))
            }
            throw error
        }
    }

    func converge(_ simulator: SyncSimulator, seed: UInt64) throws {
        try simulator.run(steps: 60)
        try simulator.settle()
        try expectSameContents(simulator, seed: seed)
        try expectInvariants(simulator, seed: seed)
        // Compaction and tombstone collection everywhere, then more edits in any order: still
        // one outcome, and no deleted record comes back.
        try simulator.compactEverywhere()
        try expectSameContents(simulator, seed: seed)
        for index in simulator.devices.indices {
            let kept = try simulator.tombstones(index)
            #expect(kept == 0, "seed \(seed): device\(index) keeps tombstones that are stable")
            if kept > 0, ProcessInfo.processInfo.environment["CONCORD_SYNC_FULL_TRACE"] != nil {
                print("FULLTRACE\n" + simulator.trace.filter { !$0.contains("deliver") }.joined(separator: "\n"))
            }
        }
        try simulator.run(steps: 30)
        try simulator.settle()
        try expectSameContents(simulator, seed: seed)
        try expectInvariants(simulator, seed: seed)
    }

    /// No acknowledged save lost, no deleted record back, no repair of a reference whose target
    /// nobody deleted.
    func expectInvariants(_ simulator: SyncSimulator, seed: UInt64) throws {
        let problems = try simulator.invariantViolations()
        if !problems.isEmpty, ProcessInfo.processInfo.environment["CONCORD_SYNC_FULL_TRACE"] != nil {
            print("FULLTRACE\n" + simulator.trace.filter { !$0.contains("deliver") }.joined(separator: "\n"))
        }
        if !problems.isEmpty {
            let trace = simulator.trace.suffix(30).joined(separator: "; ")
            Issue.record(
                "seed \(seed): \(problems.count) invariant violation(s):\n\(problems.prefix(10).joined(separator: "\n"))\ntrace: \(trace)"
            )
        }
    }

    func expectSameContents(_ simulator: SyncSimulator, seed: UInt64) throws {
        let reference = try simulator.contents(0)
        for index in 1..<simulator.devices.count {
            let other = try simulator.contents(index)
            if other != reference {
                if ProcessInfo.processInfo.environment["CONCORD_SYNC_FULL_TRACE"] != nil {
                    print("FULLTRACE\n" + simulator.trace.filter { !$0.contains("deliver") }.joined(separator: "\n"))
                }
                let mine = Set(reference)
                let theirs = Set(other)
                Issue.record(
                    """
                    seed \(seed): device\(index) differs from device0
                    only on device0: \(mine.subtracting(theirs).sorted { $0.id < $1.id })
                    only on device\(index): \(theirs.subtracting(mine).sorted { $0.id < $1.id })
                    trace: \(simulator.trace.suffix(30).joined(separator: "; "))
                    """
                )
            }
        }
    }

    @Test("The same seed replays the same run")
    func deterministic() throws {
        let first = try SyncSimulator(seed: 42, devices: 3)
        try first.run(steps: 40)
        let second = try SyncSimulator(seed: 42, devices: 3)
        try second.run(steps: 40)
        #expect(first.trace == second.trace)
        #expect(try first.contents(0) == second.contents(0))  // ids come from the seed too
        try first.settle()
        let records = try first.contents(0)
        let imports = first.trace.filter { $0.contains("imported") }.count
        print(
            "seed 42: \(records.count) records (\(records.filter { !$0.toMany.isEmpty || !$0.toOne.isEmpty }.count) related), \(first.trace.filter { $0.contains("edit") }.count) edits, \(imports) imports"
        )
        #expect(!records.isEmpty && first.trace.filter { $0.contains("edit") }.count > 5 && imports > 3)
        // With lifecycle steps and several processes per device too.
        let runs = try (0..<2).map { _ in
            let simulator = try SyncSimulator(seed: 7, devices: 3, processes: 1...2, lifecycle: true)
            try simulator.run(steps: 60)
            try simulator.settle()
            return (simulator.trace, try simulator.contents(0))
        }
        #expect(runs[0].0 == runs[1].0)
        #expect(runs[0].1 == runs[1].1)
    }
}
