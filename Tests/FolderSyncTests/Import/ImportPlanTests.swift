import Foundation
import Testing

@testable import FolderSync

/// The importer's plan alone (``CausalPlan``): which of the logs found apply now, in which order,
/// and what holds the rest back, from what is applied and what each log depends on. No store, no
/// container: the candidates are made here.
@Suite("Import plan")
struct ImportPlanTests {
    func log(
        _ device: String,
        _ sequence: UInt64,
        after dependencies: [String: UInt64] = [:],
        size: Int = 10
    )
        -> CausalPlan.Candidate
    {
        CausalPlan.Candidate(
            url: URL(fileURLWithPath: "/container/notes/devices/\(device)/\(sequence).cclog"),
            log: LogFile(device: device, sequence: sequence, schemaVersion: 1, created: Date(), payload: Data()),
            dependencies: dependencies,
            size: size
        )
    }

    func applied(_ through: UInt64) -> AppliedLogs { AppliedLogs(through: through) }

    func names(_ plan: CausalPlan) -> [String] { plan.order.map { "\($0.log.device)\($0.log.sequence)" } }

    @Test(
        "a device's logs apply in their numbers' order, whatever the order they were found in; applied ones are passed over"
    )
    func ownOrder() {
        let plan = CausalPlan(
            applied: ["beta": applied(1)],
            candidates: [log("beta", 3), log("beta", 1), log("beta", 2)],
            assumedDevice: "alpha"
        )
        #expect(names(plan) == ["beta2", "beta3"])
        #expect(plan.blocks.isEmpty)
        #expect(plan.applied["beta"]?.through == 3)
    }

    @Test("a log waits for the other device's logs its writer had applied; once they are in the plan it follows them")
    func dependencies() {
        let plan = CausalPlan(
            applied: [:],
            candidates: [log("beta", 1, after: ["gamma": 2]), log("gamma", 1), log("gamma", 2)],
            assumedDevice: "alpha"
        )
        #expect(names(plan) == ["gamma1", "gamma2", "beta1"])
        #expect(plan.blocks.isEmpty)
    }

    @Test("a gap holds back the device's later logs and is reported missing, naming the number")
    func gap() {
        let plan = CausalPlan(
            applied: ["beta": applied(1)],
            candidates: [log("beta", 3), log("beta", 4)],
            assumedDevice: "alpha"
        )
        #expect(plan.order.isEmpty)
        #expect(plan.blocks == [.missing(device: "beta", sequence: 2)])
        #expect(plan.missing.map { "\($0.device)\($0.sequence)" } == ["beta2"])
    }

    @Test("a log waiting for another device's log that is not there: it waits, and that log is reported missing")
    func missingDependency() {
        let plan = CausalPlan(
            applied: ["gamma": applied(1)],
            candidates: [log("beta", 1, after: ["gamma": 3]), log("gamma", 2)],
            assumedDevice: "alpha"
        )
        #expect(names(plan) == ["gamma2"])
        #expect(plan.blocks.contains(.waiting(device: "beta", sequence: 1, on: "gamma", through: 3)))
        #expect(plan.missing.map { "\($0.device)\($0.sequence)" } == ["gamma3"])
    }

    @Test("dependencies on this device's own logs hold when they are not imported, and count when they are")
    func assumedDevice() {
        let candidates = [log("beta", 1, after: ["alpha": 5])]
        #expect(names(CausalPlan(applied: [:], candidates: candidates, assumedDevice: "alpha")) == ["beta1"])
        let restoring = CausalPlan(applied: ["alpha": applied(4)], candidates: candidates, assumedDevice: nil)
        #expect(restoring.order.isEmpty)
        #expect(restoring.missing.map { "\($0.device)\($0.sequence)" } == ["alpha5"])
    }

    @Test("a log that follows one applied already, past numbers its device leapt over, need not wait for them")
    func leap() {
        let plan = CausalPlan(
            applied: ["beta": applied(2)],
            candidates: [log("beta", 1_000_003, after: ["beta": 2])],
            assumedDevice: "alpha"
        )
        #expect(names(plan) == ["beta1000003"])
        #expect(plan.applied["beta"]?.contains(1_000_003) == true)
    }

    @Test("batches hold at most the number of logs and about the bytes asked for, and at least one log")
    func batches() {
        let order = [log("beta", 1, size: 40), log("beta", 2, size: 40), log("beta", 3, size: 40), log("beta", 4)]
        #expect(CausalPlan.batch(of: order[...], logs: 2, bytes: 1_000).count == 2)
        #expect(CausalPlan.batch(of: order[...], logs: 10, bytes: 90).count == 2)
        #expect(CausalPlan.batch(of: order[...], logs: 10, bytes: 1).count == 1)
        #expect(CausalPlan.batch(of: order[2...], logs: 10, bytes: 1_000).count == 2)
    }
}
