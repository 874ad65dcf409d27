import FolderSync
import Foundation
import SyncTestKit
import Testing

extension BaselineCatchUpTests {
    /// alpha and beta, knowing of nobody yet: alpha folds its first log ("one") into a baseline and
    /// removes it (then saves `alphaAfterward`, if any, as log 2); beta folds three logs of its
    /// own ("b1" to "b3"), so its baseline covers more than alpha's, and nothing of alpha's.
    func foldedApart(alphaAfterward: String?) throws -> SyncTestBench {
        let bench = SyncTestBench()
        try bench.addDevice("alpha")
        try bench.addDevice("beta")
        try bench.addNote("alpha", "one")
        try bench["alpha"].sync.publishAcknowledgement()
        #expect(try bench["alpha"].sync.compact() == 1)
        if let alphaAfterward { try bench.addNote("alpha", alphaAfterward) }
        for title in ["b1", "b2", "b3"] { try bench.addNote("beta", title) }
        try bench["beta"].sync.publishAcknowledgement()
        #expect(try bench["beta"].sync.compact() == 3)
        return bench
    }

    @Test(
        "a device whose next log is gone catches up from the baseline that covers it, even when another baseline covers more"
    )
    func catchUpFromABaselineThatIsNotTheNewest() throws {
        let bench = try foldedApart(alphaAfterward: "two")
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
        // (Alpha's only log is folded away: nothing of alpha's shows a gap.)
        let bench = try foldedApart(alphaAfterward: nil)
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
