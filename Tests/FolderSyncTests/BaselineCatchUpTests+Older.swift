import FolderSync
import Foundation
import SyncTestKit
import Testing

extension BaselineCatchUpTests {
    @Test(
        "a device whose next log is gone catches up from the baseline that covers it, even when another baseline covers more"
    )
    func catchUpFromABaselineThatIsNotTheNewest() throws {
        let bench = SyncTestBench()
        try bench.addDevice("alpha")
        try bench.addDevice("beta")
        // Alpha, knowing of nobody yet, folds its first log into a baseline and removes it.
        try bench.addNote("alpha", "one")
        try bench["alpha"].sync.publishAcknowledgement()
        #expect(try bench["alpha"].sync.compact() == 1)
        try bench.addNote("alpha", "two")
        // Beta, alone too, folds three logs of its own: its baseline covers more than alpha's,
        // and nothing of alpha's.
        for title in ["b1", "b2", "b3"] { try bench.addNote("beta", title) }
        try bench["beta"].sync.publishAcknowledgement()
        #expect(try bench["beta"].sync.compact() == 3)
        // Alpha's baseline and its second log reach beta: its first log is only in the baseline.
        try Self.deliverBaselines(bench, of: "alpha", to: "beta")
        try bench.deliver("alpha", [2], to: "beta")
        let report = try bench.importOn("beta")
        #expect(report.blocked == 0, "\(report)")
        #expect(try bench.titles("beta") == ["b1", "b2", "b3", "one", "two"])
        #expect(try bench["beta"].sync.importedThrough(device: "alpha") == 2)
    }
}

extension BaselineCatchUpTests {
    @Test(
        "a device catches up from a baseline that holds the only copy of another device's last logs (compacted away: no later log shows a gap), though another baseline covers more, in whichever order they arrive (soak seed 933)",
        arguments: [false, true]
    )
    func catchUpFromABaselineWithNoGapShowing(smallerFirst: Bool) throws {
        let bench = SyncTestBench()
        try bench.addDevice("alpha")
        try bench.addDevice("beta")
        // Alpha folds its only log into a baseline and removes it: nothing of alpha's shows a gap.
        try bench.addNote("alpha", "one")
        try bench["alpha"].sync.publishAcknowledgement()
        #expect(try bench["alpha"].sync.compact() == 1)
        // Beta folds three logs of its own: its baseline covers more, and nothing of alpha's.
        for title in ["b1", "b2", "b3"] { try bench.addNote("beta", title) }
        try bench["beta"].sync.publishAcknowledgement()
        #expect(try bench["beta"].sync.compact() == 3)
        if smallerFirst {
            try Self.deliverBaselines(bench, of: "alpha", to: "beta")
            try bench.importOn("beta")
        } else {
            // (Beta has looked at the baselines already: the larger one, its own, told it nothing.)
            try bench.importOn("beta")
            try Self.deliverBaselines(bench, of: "alpha", to: "beta")
        }
        try bench.importOn("beta")
        #expect(try bench.titles("beta") == ["b1", "b2", "b3", "one"])
        #expect(try bench["beta"].sync.importedThrough(device: "alpha") == 1)
    }
}
