import FolderSync
import Foundation
import Persistence
import SyncTestKit
import Synchronization
import Testing

/// Devices that start one new container at the same moment on a folder they share directly (NFS,
/// one machine's folder: no sync engine in between to keep each device's identity file as a
/// conflict copy). The second identity written must not replace the first: a device that
/// recorded the first would take the container for another one at its next launch, and with the
/// default policy replace it (stopping everyone) or replace its own data with it.
@Suite("Devices starting one container at once")
struct SimultaneousStartTests {
    @Test(
        "four devices enable sync at once on one empty folder: one identity stays, each resumes at its next launch, and every note reaches every device"
    )
    func simultaneousStartsJoinOneIdentity() throws {
        // (The race is between a device's look for an identity and its write of one: each round
        // lines the four up behind one start signal.)
        for round in 0..<6 {
            let bench = LifecycleBench()
            let names = ["alpha", "beta", "gamma", "delta"]
            let devices = try names.map { try bench.addDevice($0, notes: ["\($0)'s"]) }
            try enableTogether(devices)
            let storeFolder = bench.container.appendingPathComponent("notes", isDirectory: true)
            let identities = try FileManager.default.contentsOfDirectory(atPath: storeFolder.path)
                .filter { $0.hasPrefix("container") }
            #expect(identities == ["container.plist"], "round \(round): \(identities)")
            // The next launch of each finds the container it recorded.
            for device in devices {
                device.sync.stop()
                let again = try device.sync.enable(live: false)
                #expect(again.state == .syncing, "round \(round), \(device.name)")
                #expect(
                    again.join?.situation == .resuming,
                    "round \(round), \(device.name): \(again.join.map { "\($0)" } ?? "no join")"
                )
            }
            for _ in 0..<2 {
                for device in devices {
                    try device.sync.exportPending()
                    try device.sync.importAvailable()
                }
            }
            let everyone = names.map { "\($0)'s" }.sorted()
            for device in devices {
                #expect(try device.titles() == everyone, "round \(round), \(device.name)")
                #expect(device.sync.state == .syncing, "round \(round), \(device.name)")
            }
        }
    }

    /// Enables sync (not live) on every device at once, each on a thread of its own released by
    /// one signal; fails on any error, and if they have not all returned within a bound.
    private func enableTogether(_ devices: [LifecycleBench.Device]) throws {
        let start = DispatchSemaphore(value: 0)
        let group = DispatchGroup()
        let failures = Mutex<[String]>([])
        for device in devices {
            group.enter()
            Thread.detachNewThread {
                start.wait()
                do {
                    let enabling = try device.sync.enable(live: false)
                    if enabling.state != .syncing { failures.withLock { $0.append("\(device.name): \(enabling)") } }
                } catch {
                    failures.withLock { $0.append("\(device.name): \(error)") }
                }
                group.leave()
            }
        }
        for _ in devices { start.signal() }
        #expect(group.wait(timeout: .now() + 60) == .success, "the devices did not all enable within 60 s")
        let failed = failures.withLock { $0 }
        #expect(failed.isEmpty, "\(failed)")
    }
}
