import Persistence
import PlistStore
import StoreConformance
import Testing

@Suite("Plist store conformance")
struct PlistStoreConformanceTests {
    @Test("Plist store passes the store-plugin contract", arguments: StoreConformance.checkNames)
    func conformance(_ check: String) throws {
        try StoreConformance(storeType: PlistStore.self).run(check)
    }
}
